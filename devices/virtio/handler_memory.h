// Memory for the one Asio operation a queue worker has queued at any time, so that scheduling a
// batch takes nothing from the heap.
#pragma once

#include <atomic>
#include <cstddef>
#include <new>
#include <utility>

namespace mvmm::devices::virtio {

// Room for the one operation a worker has queued at any time (a posted resume or the wait for
// its kick), so scheduling a batch takes nothing from the heap.  Asio's own per-thread cache of
// operation memory misses now and then when I/O threads trade a queue's work (request-bench
// --short under load: one allocation in 20 runs without this; a strand's invoker, about one in
// a thousand requests).
class HandlerMemory {
  public:
    void* allocate(size_t size) {
        if (size <= sizeof storage_ && !in_use_.exchange(true)) return storage_;
        return ::operator new(size);  // larger than Asio's operations are, or a second one
    }
    void deallocate(void* pointer) noexcept {
        if (pointer == storage_)
            in_use_.store(false);
        else
            ::operator delete(pointer);
    }

  private:
    alignas(std::max_align_t) std::byte storage_[256];
    std::atomic<bool> in_use_{false};
};

template <class T>
struct HandlerAllocator {
    using value_type = T;
    explicit HandlerAllocator(HandlerMemory& m) noexcept : memory(&m) {}
    template <class U>
    HandlerAllocator(const HandlerAllocator<U>& other) noexcept : memory(other.memory) {}
    T* allocate(size_t n) { return static_cast<T*>(memory->allocate(n * sizeof(T))); }
    void deallocate(T* pointer, size_t) noexcept { memory->deallocate(pointer); }
    template <class U>
    bool operator==(const HandlerAllocator<U>& other) const noexcept {
        return memory == other.memory;
    }

    HandlerMemory* memory;
};

// A handler whose operation Asio allocates from its HandlerMemory (the associated allocator).
template <class Function>
struct InMemory {
    using allocator_type = HandlerAllocator<void>;
    allocator_type get_allocator() const noexcept { return allocator; }
    template <class... Args>
    void operator()(Args&&... args) {
        function(std::forward<Args>(args)...);
    }

    Function function;
    allocator_type allocator;
};

}  // namespace mvmm::devices::virtio
