// Counts heap allocations for benchmarks: alloc_counter.cc, linked into a benchmark, puts
// malloc, calloc, realloc, the aligned allocators and operator new in front of whichever
// allocator the build links (glibc, jemalloc, tcmalloc) and counts every call.
#pragma once

#include <cstdint>

namespace mvmm::bench {

// False in builds without the hook (sanitizers bring their own allocator).
bool counting_allocations();
// Allocations so far, by every thread.
uint64_t allocations();
// The allocator malloc reaches: "jemalloc", "tcmalloc" or "glibc" (by the symbols loaded).
const char* active_allocator();

}  // namespace mvmm::bench
