// What the guest RAM tests measure: how much of a mapping is resident (mem/mapping.h), and the
// process's RSS.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <fstream>

#include "base/mapping.h"

namespace mvmm {

// The process's resident set size in bytes.
inline uint64_t process_rss() {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace mvmm
