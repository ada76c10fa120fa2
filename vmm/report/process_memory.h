// The VMM's own memory as the kernel and the allocator see it: /proc/self/smaps,
// /proc/self/status (mallinfo2() is rcu::malloc_totals()).  The parsers take a stream so tests feed
// canned text.
#pragma once

#include <cstdint>
#include <istream>
#include <optional>

namespace mvmm::api {

struct SmapsTotals {
    uint64_t heap_rss_bytes = 0;   // Rss of the [heap] mapping (the sbrk heap)
    uint64_t heap_size_bytes = 0;  // its Size
    // Rss summed over the private mappings no file backs: the heap, malloc's mmap'ed arenas and
    // large blocks, thread stacks, and guest RAM when its backend is anonymous memory.
    uint64_t anon_rss_bytes = 0;

    bool operator==(const SmapsTotals&) const = default;
};

struct StatusTotals {
    uint64_t vm_rss_bytes = 0;  // VmRSS
    uint64_t vm_hwm_bytes = 0;  // VmHWM: the peak resident set

    bool operator==(const StatusTotals&) const = default;
};

// Unknown lines are skipped: text that is not smaps or status just gives zeros.
SmapsTotals parse_smaps(std::istream& smaps);
StatusTotals parse_status(std::istream& status);

// The same, for this process.
SmapsTotals read_smaps();
StatusTotals read_status();

}  // namespace mvmm::api
