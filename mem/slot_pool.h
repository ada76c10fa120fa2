// Fixed-size slots for what lives while a request is in flight (virtio requests, bounce
// buffers), with a bound on how many are out at once.  In pool mode every slot is carved from
// one anonymous mapping reserved up front and touched lazily: a slot's pages become resident
// when its user first writes them, so an idle pool costs address space, not memory, and a
// busy one only what its peak concurrency touched (released slots are reused last-in first
// out).  Nothing is zeroed: the user initialises what it reads.  The malloc and calloc modes
// take each slot from the heap on acquire() (calloc zeroes it) and free it on release, as
// QEMU did with its requests, so one build can compare them.  Exhaustion is never an
// allocation: acquire() returns nothing and the caller holds the work back until a release.
// Thread-safe; peak_in_use() and resident_bytes() are for statistics readers on other threads.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/mapping.h"

namespace mvmm {

enum class SlotSource { pool, malloc, calloc };
std::string_view to_string(SlotSource source);

class SlotPool {
  public:
    static constexpr size_t kAlignment = 64;  // a cache line: slots never share one

    // One slot, returned to its pool when destroyed.  Must not outlive the pool.
    class Slot {
      public:
        Slot(Slot&& other) noexcept;
        Slot& operator=(Slot&& other) noexcept;
        Slot(const Slot&) = delete;
        Slot& operator=(const Slot&) = delete;
        ~Slot() { reset(); }

        // slot_size() bytes, aligned to kAlignment in pool mode (16 from malloc/calloc).
        std::span<std::byte> bytes() const noexcept { return {data_, pool_->slot_size_}; }

      private:
        friend class SlotPool;
        Slot(SlotPool& pool, std::byte* data) noexcept : pool_(&pool), data_(data) {}
        void reset() noexcept;

        SlotPool* pool_;
        std::byte* data_;
    };

    // At most `capacity` slots of `slot_size` bytes (rounded up to kAlignment) out at once.
    // Throws std::invalid_argument for a zero size or capacity, std::system_error when the
    // pool's address space cannot be reserved.
    SlotPool(size_t slot_size, uint32_t capacity, SlotSource source = SlotSource::pool);
    SlotPool(const SlotPool&) = delete;
    SlotPool& operator=(const SlotPool&) = delete;

    // A slot, or nullopt when `capacity` slots are out.  In pool mode it never allocates.
    // Throws std::bad_alloc when malloc/calloc fails.
    std::optional<Slot> acquire();

    size_t slot_size() const noexcept { return slot_size_; }
    uint32_t capacity() const noexcept { return capacity_; }
    SlotSource source() const noexcept { return source_; }
    uint32_t in_use() const;
    // The most slots out at once so far (a relaxed atomic: readers need no lock).
    uint32_t peak_in_use() const noexcept { return peak_in_use_.load(std::memory_order_relaxed); }
    // Bytes of the pool's mapping in memory (mincore); 0 in the malloc and calloc modes.
    uint64_t resident_bytes() const;

  private:
    void release(std::byte* data) noexcept;

    const size_t slot_size_;
    const uint32_t capacity_;
    const SlotSource source_;
    Mapping mapping_;  // pool mode: capacity_ slots of slot_size_ bytes
    mutable std::mutex mutex_;
    std::vector<uint32_t> free_;  // released slots, most recent last
    uint32_t fresh_ = 0;          // slots [fresh_, capacity_) were never handed out
    uint32_t in_use_ = 0;
    std::atomic<uint32_t> peak_in_use_{0};  // written under mutex_
};

}  // namespace mvmm
