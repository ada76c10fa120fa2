// malloc_trim() with its cost and effect measured; compiled out without glibc malloc.
#include "rcu/heap_trim.h"

#include "rcu_config.h"  // generated in the build folder

#if MVMM_HAVE_MALLOC_TRIM
#include <malloc.h>
#include <unistd.h>

#include <fstream>
#endif

namespace mvmm::rcu {

void TrimCounters::add(const TrimResult& result) {
    ++trims;
    time += result.duration;
    heap_bytes_released += result.heap_bytes_released;
    rss_bytes_released += result.rss_bytes_released;
}

bool trim_supported() noexcept {
    return MVMM_HAVE_MALLOC_TRIM;
}

const char* allocator_name() noexcept {
    return MVMM_ALLOCATOR;
}

std::optional<MallocTotals> malloc_totals() {
#if MVMM_HAVE_MALLOC_TRIM
    const struct mallinfo2 info = mallinfo2();
    return MallocTotals{info.arena, info.hblkhd, info.uordblks, info.fordblks, info.keepcost};
#else
    return std::nullopt;
#endif
}

#if MVMM_HAVE_MALLOC_TRIM

namespace {

struct Footprint {
    uint64_t heap = 0;
    uint64_t resident = 0;
};

Footprint footprint() {
    struct mallinfo2 info = mallinfo2();
    uint64_t pages = 0;
    std::ifstream statm("/proc/self/statm");
    statm.ignore(64, ' ') >> pages;  // the second field is the resident set, in pages
    return {info.arena + info.hblkhd, pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE))};
}

uint64_t shrink(uint64_t before, uint64_t after) {
    return before > after ? before - after : 0;
}

}  // namespace

std::optional<TrimResult> trim_heap(std::size_t pad) {
    const Footprint before = footprint();
    const auto start = std::chrono::steady_clock::now();
    malloc_trim(pad);
    const auto took = std::chrono::steady_clock::now() - start;
    const Footprint after = footprint();
    return TrimResult{took, shrink(before.heap, after.heap),
                      shrink(before.resident, after.resident)};
}

#else

std::optional<TrimResult> trim_heap(std::size_t) {
    return std::nullopt;
}

#endif

}  // namespace mvmm::rcu
