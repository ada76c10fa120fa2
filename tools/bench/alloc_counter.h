// Counts heap allocations for benchmarks: alloc_counter.cc, linked into a benchmark, puts
// malloc, calloc, realloc, the aligned allocators and operator new in front of whichever
// allocator the build links (glibc, jemalloc, tcmalloc) and counts every call, in all and per
// thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace mvmm::bench {

// False in builds without the hook (sanitizers bring their own allocator).
bool counting_allocations();
// Allocations so far, by every thread.
uint64_t allocations();
// Allocations so far by the calling thread (a devices::virtio::ThreadAllocations).
uint64_t thread_allocations() noexcept;
// The calling thread's count, for reading from another thread while this one lives.
const std::atomic<uint64_t>& this_thread_allocation_counter() noexcept;
// The allocator malloc reaches: "jemalloc", "tcmalloc" or "glibc" (by the symbols loaded).
const char* active_allocator();

}  // namespace mvmm::bench
