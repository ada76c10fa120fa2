#include "mem/ram_config.h"

#include <unistd.h>

#include <cstdio>
#include <iterator>

namespace mvmm {

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

}  // namespace mvmm
