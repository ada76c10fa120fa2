#include "vmm/cli/option_parser.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>

#include "vmm/cli/usage_error.h"

namespace mvmm {

namespace {

std::optional<uint64_t> decimal(std::string_view text) {
    uint64_t number = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (text.empty() || error != std::errc() || end != text.data() + text.size())
        return std::nullopt;
    return number;
}

// The shift of a size suffix; a bare number's is `bare_shift`.
std::optional<unsigned> suffix_shift(std::string_view suffix, unsigned bare_shift) {
    if (suffix.empty()) return bare_shift;
    if (suffix.size() != 1) return std::nullopt;
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
        case 'K':
            return 10;
        case 'M':
            return 20;
        case 'G':
            return 30;
        case 'T':
            return 40;
        default:
            return std::nullopt;
    }
}

std::string known_keys(const std::vector<std::string_view>& keys) {
    std::string list;
    for (auto key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
    return list;
}

}  // namespace

uint64_t parse_size(std::string_view text, SizeUnit bare) {
    const std::string quoted = "size '" + std::string(text) + "'";
    const auto digits =
        std::find_if_not(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    const auto number = decimal(text.substr(0, digits - text.begin()));
    const auto shift =
        suffix_shift(text.substr(digits - text.begin()), bare == SizeUnit::MiB ? 20 : 0);
    if (digits != text.begin() && !number) throw UsageError(quoted + " is too large");
    if (!number || !shift) throw UsageError(quoted + " is not a number with a K, M, G or T suffix");
    if (*number > (UINT64_MAX >> *shift)) throw UsageError(quoted + " is too large");
    return *number << *shift;
}

OptionParser::OptionParser(std::string flag, std::vector<std::string_view> keys,
                           std::string_view bare_key)
    : flag_(std::move(flag)), keys_(std::move(keys)), bare_key_(bare_key) {}

void OptionParser::parse(std::string_view text) {
    text_ = text;
    values_.clear();
    if (text.empty()) return;  // what is required says so
    for (size_t start = 0; start <= text.size();) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string_view item = text.substr(start, comma - start);
        const bool first = start == 0;
        start = comma + 1;
        if (item.empty()) fail("an empty item (a stray comma?)");
        const size_t equals = item.find('=');
        const bool bare = equals == std::string_view::npos;
        if (bare && !(first && !bare_key_.empty()))
            fail("'" + std::string(item) + "' is not key=value");
        const std::string_view key = bare ? bare_key_ : item.substr(0, equals);
        if (std::ranges::find(keys_, key) == keys_.end())
            fail("unknown key '" + std::string(key) + "' (known: " + known_keys(keys_) + ")");
        const std::string value(bare ? item : item.substr(equals + 1));
        if (!values_.emplace(key, Item{std::string(item), value}).second)
            fail(std::string(key) + " is given twice");
    }
}

std::optional<std::string_view> OptionParser::get(std::string_view key) const {
    const auto it = values_.find(key);
    if (it == values_.end()) return std::nullopt;
    return it->second.value;
}

std::string_view OptionParser::required(std::string_view key) const {
    const auto value = get(key);
    if (!value) fail(std::string(key) + "= is required");
    if (value->empty()) fail(key, "must not be empty");
    return *value;
}

bool OptionParser::toggle(std::string_view key, bool fallback) const {
    const auto value = get(key);
    if (!value) return fallback;
    if (*value == "on" || *value == "yes" || *value == "true") return true;
    if (*value == "off" || *value == "no" || *value == "false") return false;
    fail(key, "expected on or off");
}

std::optional<uint64_t> OptionParser::number(std::string_view key, uint64_t min,
                                             uint64_t max) const {
    return number_where(key, min, max, "a number", [](uint64_t) { return true; });
}

std::optional<uint64_t> OptionParser::power_of_two(std::string_view key, uint64_t min,
                                                   uint64_t max) const {
    return number_where(key, min, max, "a power of two",
                        [](uint64_t number) { return std::has_single_bit(number); });
}

std::optional<uint64_t> OptionParser::number_where(std::string_view key, uint64_t min, uint64_t max,
                                                   std::string_view kind,
                                                   bool (*accept)(uint64_t)) const {
    const auto value = get(key);
    if (!value) return std::nullopt;
    const auto number = decimal(*value);
    if (!number || *number < min || *number > max || !accept(*number))
        fail(key, "expected " + std::string(kind) + " from " + std::to_string(min) + " to " +
                      std::to_string(max));
    return number;
}

std::optional<uint64_t> OptionParser::size(std::string_view key, SizeUnit bare) const {
    const auto value = get(key);
    if (!value) return std::nullopt;
    try {
        return parse_size(*value, bare);
    } catch (const UsageError& e) {
        fail(key, e.what());
    }
}

void OptionParser::fail(std::string_view key, std::string_view why) const {
    const auto it = values_.find(key);
    const std::string item = it == values_.end() ? std::string(key) : it->second.text;
    fail(item + ": " + std::string(why));
}

void OptionParser::fail(std::string_view why) const {
    throw UsageError(flag_ + " '" + text_ + "': " + std::string(why));
}

}  // namespace mvmm
