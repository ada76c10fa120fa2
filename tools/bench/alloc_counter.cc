// The allocation-counting hook (alloc_counter.h).  Defined in the executable, these symbols come
// before the allocator's in the dynamic linker's search order, so every malloc, every glibc
// call that allocates and every operator new lands here first; each forwards to the next
// definition (dlsym RTLD_NEXT): glibc's, jemalloc's or tcmalloc's.  dlsym itself may allocate
// before the real functions are known: those few calls are served from a static arena.
#include "bench/alloc_counter.h"

#include <dlfcn.h>
#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

namespace mvmm::bench {

const char* active_allocator() {
    if (::dlsym(RTLD_DEFAULT, "mallctl")) return "jemalloc";
    if (::dlsym(RTLD_DEFAULT, "tc_malloc")) return "tcmalloc";
    return "glibc";
}

}  // namespace mvmm::bench

#ifdef MVMM_COUNT_ALLOCATIONS

namespace mvmm::bench {
namespace {

std::atomic<uint64_t> counted{0};
thread_local std::atomic<uint64_t> counted_here{0};  // this thread's share of `counted`

void count_allocation() noexcept {
    counted.fetch_add(1, std::memory_order_relaxed);
    counted_here.fetch_add(1, std::memory_order_relaxed);
}

struct Allocator {
    void* (*malloc)(size_t);
    void* (*calloc)(size_t, size_t);
    void* (*realloc)(void*, size_t);
    void (*free)(void*);
    int (*posix_memalign)(void**, size_t, size_t);
    size_t (*usable_size)(void*);
};

// Serves allocations made while dlsym looks the real functions up; never freed.
alignas(64) unsigned char arena[64 * 1024];
std::atomic<size_t> arena_used{0};
bool in_arena(void* p) {
    auto* byte = static_cast<unsigned char*>(p);
    return byte >= arena && byte < arena + sizeof arena;
}
void* from_arena(size_t size) {
    const size_t at = arena_used.fetch_add((size + 63) / 64 * 64);
    if (at + size > sizeof arena) std::abort();
    return arena + at;
}

template <class F>
F next(const char* name) {
    return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

thread_local bool resolving = false;
const Allocator* real() {
    static const Allocator allocator = [] {
        resolving = true;
        Allocator a{next<decltype(Allocator::malloc)>("malloc"),
                    next<decltype(Allocator::calloc)>("calloc"),
                    next<decltype(Allocator::realloc)>("realloc"),
                    next<decltype(Allocator::free)>("free"),
                    next<decltype(Allocator::posix_memalign)>("posix_memalign"),
                    next<decltype(Allocator::usable_size)>("malloc_usable_size")};
        resolving = false;
        return a;
    }();
    return &allocator;
}

void* aligned(size_t alignment, size_t size) {
    void* p = nullptr;
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    return ::posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}

}  // namespace

bool counting_allocations() {
    return true;
}
uint64_t allocations() {
    return counted.load(std::memory_order_relaxed);
}
uint64_t thread_allocations() noexcept {
    return counted_here.load(std::memory_order_relaxed);
}
const std::atomic<uint64_t>& this_thread_allocation_counter() noexcept {
    return counted_here;
}

}  // namespace mvmm::bench

using mvmm::bench::count_allocation;
using mvmm::bench::real;
using mvmm::bench::resolving;

extern "C" {

void* malloc(size_t size) noexcept {
    if (resolving) return mvmm::bench::from_arena(size);
    count_allocation();
    return real()->malloc(size);
}

void* calloc(size_t count, size_t size) noexcept {
    if (resolving) return mvmm::bench::from_arena(count * size);  // static: already zero
    count_allocation();
    return real()->calloc(count, size);
}

void* realloc(void* p, size_t size) noexcept {
    count_allocation();
    if (mvmm::bench::in_arena(p)) {
        void* moved = real()->malloc(size);
        const auto* end = mvmm::bench::arena + sizeof mvmm::bench::arena;
        const size_t available = static_cast<size_t>(end - static_cast<unsigned char*>(p));
        if (moved) std::memcpy(moved, p, size < available ? size : available);
        return moved;
    }
    return real()->realloc(p, size);
}

void free(void* p) noexcept {
    if (!p || mvmm::bench::in_arena(p)) return;
    real()->free(p);
}

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
    count_allocation();
    return real()->posix_memalign(out, alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) noexcept {
    return mvmm::bench::aligned(alignment, size);
}
void* memalign(size_t alignment, size_t size) noexcept {
    return mvmm::bench::aligned(alignment, size);
}
void* valloc(size_t size) noexcept {
    return mvmm::bench::aligned(4096, size);
}
void* pvalloc(size_t size) noexcept {
    return mvmm::bench::aligned(4096, (size + 4095) / 4096 * 4096);
}
size_t malloc_usable_size(void* p) noexcept {
    return p && !mvmm::bench::in_arena(p) ? real()->usable_size(p) : 0;
}

}  // extern "C"

// operator new and delete go through the functions above, whatever the allocator defines.
void* operator new(size_t size) {
    if (void* p = std::malloc(size ? size : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t size) {
    return operator new(size);
}
void* operator new(size_t size, const std::nothrow_t&) noexcept {
    return std::malloc(size ? size : 1);
}
void* operator new[](size_t size, const std::nothrow_t&) noexcept {
    return std::malloc(size ? size : 1);
}
void* operator new(size_t size, std::align_val_t alignment) {
    if (void* p = mvmm::bench::aligned(static_cast<size_t>(alignment), size ? size : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](size_t size, std::align_val_t alignment) {
    return operator new(size, alignment);
}
void operator delete(void* p) noexcept {
    std::free(p);
}
void operator delete[](void* p) noexcept {
    std::free(p);
}
void operator delete(void* p, size_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
    std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete(void* p, size_t, std::align_val_t) noexcept {
    std::free(p);
}
void operator delete[](void* p, size_t, std::align_val_t) noexcept {
    std::free(p);
}

#else  // sanitizer builds: their runtime owns malloc

namespace mvmm::bench {
bool counting_allocations() {
    return false;
}
uint64_t allocations() {
    return 0;
}
uint64_t thread_allocations() noexcept {
    return 0;
}
const std::atomic<uint64_t>& this_thread_allocation_counter() noexcept {
    static const std::atomic<uint64_t> none{0};
    return none;
}
}  // namespace mvmm::bench

#endif
