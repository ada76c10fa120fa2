#include "vmm/report/process_memory.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>

namespace mvmm::api {

namespace {

// "Rss:   1234 kB" with key "Rss:" -> 1234 KiB in bytes.
std::optional<uint64_t> kib_field(std::string_view line, std::string_view key) {
    if (!line.starts_with(key)) return std::nullopt;
    line.remove_prefix(key.size());
    line.remove_prefix(std::min(line.find_first_not_of(" \t"), line.size()));
    uint64_t kib = 0;
    auto [end, err] = std::from_chars(line.data(), line.data() + line.size(), kib);
    if (err != std::errc{} || end == line.data()) return std::nullopt;
    return kib * 1024;
}

bool is_address_range(std::string_view token) {
    const auto dash = token.find('-');
    return dash != 0 && dash != std::string_view::npos && dash + 1 < token.size() &&
           token.find_first_not_of("0123456789abcdef-") == std::string_view::npos;
}

struct MappingKind {
    bool heap = false;
    bool anonymous_private = false;
};

// A mapping's header line: "start-end perms offset dev inode [name]".
std::optional<MappingKind> parse_mapping_header(const std::string& line) {
    std::istringstream in(line);
    std::string range, perms, offset, device, name;
    uint64_t inode = 0;
    if (!(in >> range >> perms >> offset >> device >> inode) || !is_address_range(range) ||
        perms.size() != 4) {
        return std::nullopt;
    }
    std::getline(in >> std::ws, name);
    // Named anonymous memory, but not the kernel's own pages ([vdso], [vvar], [vsyscall]).
    const bool unbacked = inode == 0 && (name.empty() || name == "[heap]" ||
                                         name.starts_with("[stack") || name.starts_with("[anon:"));
    return MappingKind{name == "[heap]", unbacked && perms[3] == 'p'};
}

}  // namespace

SmapsTotals parse_smaps(std::istream& smaps) {
    SmapsTotals totals;
    MappingKind current;
    for (std::string line; std::getline(smaps, line);) {
        if (auto header = parse_mapping_header(line)) {
            current = *header;
        } else if (auto rss = kib_field(line, "Rss:")) {
            if (current.heap) totals.heap_rss_bytes += *rss;
            if (current.anonymous_private) totals.anon_rss_bytes += *rss;
        } else if (auto size = kib_field(line, "Size:"); size && current.heap) {
            totals.heap_size_bytes += *size;
        }
    }
    return totals;
}

StatusTotals parse_status(std::istream& status) {
    StatusTotals totals;
    for (std::string line; std::getline(status, line);) {
        if (auto rss = kib_field(line, "VmRSS:")) totals.vm_rss_bytes = *rss;
        if (auto hwm = kib_field(line, "VmHWM:")) totals.vm_hwm_bytes = *hwm;
    }
    return totals;
}

SmapsTotals read_smaps() {
    std::ifstream smaps("/proc/self/smaps");
    return parse_smaps(smaps);
}

StatusTotals read_status() {
    std::ifstream status("/proc/self/status");
    return parse_status(status);
}

}  // namespace mvmm::api
