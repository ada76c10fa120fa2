#include "vmm/report/guest_marks.h"

#include <charconv>
#include <iterator>
#include <sstream>

namespace mvmm {

namespace {

constexpr std::string_view kMarker = "MVMM-MARK ";

std::optional<double> parse_seconds(const std::string& word) {
    double value = 0;
    auto [end, err] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (err != std::errc{} || end != word.data() + word.size()) return std::nullopt;
    return value;
}

}  // namespace

std::optional<GuestMark> parse_mark(std::string_view line) {
    const auto at = line.find(kMarker);
    if (at == std::string_view::npos) return std::nullopt;
    std::istringstream in{std::string(line.substr(at + kMarker.size()))};
    std::vector<std::string> words{std::istream_iterator<std::string>(in), {}};
    if (words.empty()) return std::nullopt;
    GuestMark mark{words[0], 0, std::nullopt, {}};
    size_t next = 1;
    if (words.size() > 1 && (mark.guest_uptime_s = parse_seconds(words[1]))) next = 2;
    for (; next < words.size(); ++next) {
        const auto eq = words[next].find('=');
        if (eq != std::string::npos && eq > 0)
            mark.fields.emplace_back(words[next].substr(0, eq), words[next].substr(eq + 1));
    }
    return mark;
}

std::optional<GuestMark> MarkReader::feed(uint8_t byte) {
    if (byte == '\n') {
        auto mark = parse_mark(line_);
        line_.clear();
        return mark;
    }
    if (byte != '\r' && line_.size() < kMaxLine) line_.push_back(char(byte));
    return std::nullopt;
}

}  // namespace mvmm
