// What the guest RAM tests measure: how much of a mapping is resident, and the process's RSS.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <span>
#include <stdexcept>
#include <vector>

namespace mvmm {

// Bytes of `area` (page-aligned) that are in memory, by mincore().
inline uint64_t resident_bytes(std::span<uint8_t> area) {
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> pages((area.size() + page - 1) / page);
    if (::mincore(area.data(), area.size(), pages.data()) != 0)
        throw std::runtime_error("mincore failed");
    uint64_t resident = 0;
    for (unsigned char p : pages) resident += (p & 1) ? page : 0;
    return resident;
}

// The process's resident set size in bytes.
inline uint64_t process_rss() {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace mvmm
