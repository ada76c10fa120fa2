// Giving freed heap memory back to the kernel: the call thread's trim policy, on-demand trims
// and their counters.  Trimming needs glibc's malloc_trim(); see rcu/README.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "rcu/trim_policy.h"

namespace mvmm::rcu {

struct TrimResult {
    std::chrono::nanoseconds duration{};  // time spent inside malloc_trim()
    // mallinfo2() arena + hblkhd before minus after: only what left the heap's address range
    // (top of the sbrk heap, shrunk mmap'ed arenas).
    uint64_t heap_bytes_released = 0;
    // Resident set before minus after (/proc/self/statm): also counts the free pages inside the
    // heap that malloc_trim() madvise()s away, which mallinfo2() cannot see.  Process-wide, so
    // other threads touching memory meanwhile blur it; a growth counts as 0.
    uint64_t rss_bytes_released = 0;
};

struct TrimCounters {
    uint64_t trims = 0;
    std::chrono::nanoseconds time{};
    uint64_t heap_bytes_released = 0;
    uint64_t rss_bytes_released = 0;

    void add(const TrimResult& result);
};

// A set_trim_policy() call: the new config decides from batch `from_batch` on (the call
// thread's next decision, after the batch it may be running).
struct TrimPolicyChange {
    std::chrono::steady_clock::time_point at;
    uint64_t from_batch = 0;
    TrimConfig config;
};

struct TrimStats {
    bool supported = false;  // false: built without malloc_trim, nothing is ever trimmed
    TrimConfig config;       // as last set, even when unsupported
    uint64_t batches = 0;    // batches the call thread ran
    uint64_t callbacks = 0;  // callbacks the call thread ran
    TrimCounters by_policy;  // trims the call thread made
    TrimCounters on_demand;  // trim_now()
    // The policy's changes, oldest first: the last kMaxPolicyChanges of policy_changes.
    static constexpr std::size_t kMaxPolicyChanges = 64;
    uint64_t policy_changes = 0;
    std::vector<TrimPolicyChange> recent_changes;
};

// Whether this build can trim (glibc allocator and malloc_trim found at configure time).
bool trim_supported() noexcept;
// The heap allocator linked in: "glibc", "jemalloc" or "tcmalloc" (meson -Dallocator=).
const char* allocator_name() noexcept;

// glibc malloc's view of its heap (mallinfo2()), in bytes.
struct MallocTotals {
    uint64_t arena = 0;     // sbrk'ed and mmap'ed arena memory
    uint64_t hblkhd = 0;    // blocks mmap'ed on their own
    uint64_t uordblks = 0;  // in use
    uint64_t fordblks = 0;  // free inside the arenas
    uint64_t keepcost = 0;  // free at the top of the sbrk heap, what malloc_trim(0) could release
};
// nullopt when the linked allocator is not glibc's (mallinfo2() would describe an unused heap).
std::optional<MallocTotals> malloc_totals();

// Takes effect at the call thread's next decision, after its next batch (or when it drains);
// recorded in TrimStats.  Throws std::invalid_argument if the config does not validate, and
// then changes nothing.  Returns the change.
TrimPolicyChange set_trim_policy(const TrimConfig& config);

TrimStats trim_stats();

// Trims now on the calling thread, e.g. for the management socket's trim-memory; nullopt when
// trimming is not supported by this build.
std::optional<TrimResult> trim_now();

}  // namespace mvmm::rcu
