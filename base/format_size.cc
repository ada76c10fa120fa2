#include "base/format_size.h"

#include <cstdio>
#include <iterator>

namespace mvmm {

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
