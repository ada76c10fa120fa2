#include "mem/ram_config.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstdio>
#include <set>
#include <stdexcept>

namespace mvmm {

namespace {

[[noreturn]] void reject(std::string_view item, std::string_view why) {
    throw std::invalid_argument("invalid --memory item '" + std::string(item) +
                                "': " + std::string(why));
}

bool parse_switch(std::string_view item, std::string_view value) {
    if (value == "on" || value == "true" || value == "yes") return true;
    if (value == "off" || value == "false" || value == "no") return false;
    reject(item, "expected on or off");
}

unsigned parse_number(std::string_view item, std::string_view value, unsigned max) {
    unsigned number = 0;
    auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || end != value.data() + value.size() || number > max)
        reject(item, "expected a number from 0 to " + std::to_string(max));
    return number;
}

HugePages parse_hugepages(std::string_view item, std::string_view value) {
    if (value == "none" || value == "off") return HugePages::none;
    try {
        const uint64_t size = parse_size(value);
        if (size == page_size_of(HugePages::size_2m)) return HugePages::size_2m;
        if (size == page_size_of(HugePages::size_1g)) return HugePages::size_1g;
    } catch (const std::invalid_argument&) {
    }
    reject(item, "hugepages must be none, 2M or 1G");
}

PreallocMethod parse_method(std::string_view item, std::string_view value) {
    if (value == "touch") return PreallocMethod::touch;
    if (value == "populate") return PreallocMethod::populate;
    reject(item, "prealloc-method must be touch or populate");
}

}  // namespace

uint64_t base_page_size() {
    return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

uint64_t page_size_of(HugePages hugepages) {
    switch (hugepages) {
        case HugePages::none:
            return base_page_size();
        case HugePages::size_2m:
            return 2ull << 20;
        case HugePages::size_1g:
            return 1ull << 30;
    }
    return base_page_size();
}

uint64_t parse_size(std::string_view text) {
    const std::string quoted = "size '" + std::string(text) + "'";
    uint64_t number = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
    if (error == std::errc::result_out_of_range)
        throw std::invalid_argument(quoted + " is too large");
    const std::string_view suffix(end, text.data() + text.size() - end);
    unsigned shift = 20;  // a bare number is MiB
    if (!suffix.empty()) {
        const char unit = suffix.size() == 1 ? static_cast<char>(std::toupper(suffix[0])) : '?';
        switch (unit) {
            case 'K':
                shift = 10;
                break;
            case 'M':
                shift = 20;
                break;
            case 'G':
                shift = 30;
                break;
            case 'T':
                shift = 40;
                break;
            default:
                shift = 0;
                break;
        }
    }
    if (error != std::errc() || shift == 0)
        throw std::invalid_argument(quoted + " is not a number with a K, M, G or T suffix");
    if (number > (UINT64_MAX >> shift)) throw std::invalid_argument(quoted + " is too large");
    return number << shift;
}

std::string format_size(uint64_t bytes) {
    static constexpr const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    unsigned unit = 0;
    while (unit + 1 < std::size(units) && bytes >> (10 * (unit + 1)) != 0) ++unit;
    const uint64_t unit_bytes = 1ull << (10 * unit);
    if (bytes % unit_bytes == 0) return std::to_string(bytes / unit_bytes) + " " + units[unit];
    char text[32];
    std::snprintf(text, sizeof text, "%.1f %s", static_cast<double>(bytes) / unit_bytes,
                  units[unit]);
    return text;
}

RamConfig parse_ram_config(std::string_view option) {
    RamConfig config;
    std::set<std::string_view> seen;
    for (size_t start = 0; start <= option.size();) {
        const size_t comma = std::min(option.find(',', start), option.size());
        const std::string_view item = option.substr(start, comma - start);
        const bool first = start == 0;
        start = comma + 1;

        if (item.empty())
            throw std::invalid_argument("invalid --memory '" + std::string(option) +
                                        "': an empty item");
        const size_t equals = item.find('=');
        if (equals == std::string_view::npos && !first) reject(item, "expected key=value");
        const std::string_view key =
            equals == std::string_view::npos ? "size" : item.substr(0, equals);
        const std::string_view value =
            equals == std::string_view::npos ? item : item.substr(equals + 1);
        if (!seen.insert(key).second) reject(item, std::string(key) + " is given twice");
        if (value.empty()) reject(item, "no value");

        if (key == "size") {
            try {
                config.size = parse_size(value);
            } catch (const std::invalid_argument& e) {
                reject(item, e.what());
            }
            if (config.size == 0) reject(item, "guest RAM cannot be empty");
        } else if (key == "hugepages") {
            config.hugepages = parse_hugepages(item, value);
        } else if (key == "shared") {
            config.shared = parse_switch(item, value);
        } else if (key == "path") {
            config.path = value;
        } else if (key == "prealloc") {
            config.prealloc = parse_switch(item, value);
        } else if (key == "prealloc-threads") {
            config.prealloc_threads = value == "auto" ? 0 : parse_number(item, value, 1024);
        } else if (key == "prealloc-method") {
            config.prealloc_method = parse_method(item, value);
        } else if (key == "host-node") {
            config.host_node = parse_number(item, value, 1023);
        } else {
            reject(item,
                   "unknown key (known: size, hugepages, shared, path, prealloc, "
                   "prealloc-threads, prealloc-method, host-node)");
        }
    }

    if (!seen.contains("size"))
        throw std::invalid_argument("--memory needs a size, e.g. size=512M");
    if (!config.prealloc && (seen.contains("prealloc-threads") || seen.contains("prealloc-method")))
        throw std::invalid_argument(
            "--memory: prealloc-threads and prealloc-method need prealloc=on");
    const uint64_t page_size = page_size_of(config.hugepages);
    if (config.size % page_size != 0)
        throw std::invalid_argument("--memory: size " + format_size(config.size) +
                                    " is not a whole number of " + format_size(page_size) +
                                    " pages");
    return config;
}

}  // namespace mvmm
