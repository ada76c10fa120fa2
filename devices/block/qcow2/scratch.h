// The buffers a request needs beyond the guest's: an allocating write's copy-on-write head and
// tail, a compressed cluster's bytes and what they inflate to.  Slots of one mapping
// (mem/slot_pool.h), each area page-aligned so that O_DIRECT takes it; nothing is allocated or
// zeroed per request.  A request that finds every slot out waits for one (never while holding
// the image's metadata lock, which a slot's holder may need to finish).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>

#include "mem/slot_pool.h"

namespace mvmm::devices::block::qcow2 {

class ScratchPool {
  public:
    // Throws std::system_error when the mapping cannot be reserved.
    ScratchPool(uint64_t cluster_size, size_t alignment, uint32_t slots);
    ScratchPool(const ScratchPool&) = delete;
    ScratchPool& operator=(const ScratchPool&) = delete;

    // One request's buffers, back to the pool when destroyed.
    class Lease {
      public:
        Lease(const Lease&) = delete;  // acquire() returns it in place
        Lease& operator=(const Lease&) = delete;
        ~Lease();
        // A cluster each: the bytes before and after a write in its first and last cluster.
        std::span<uint8_t> head() const { return area(0, pool_->cluster_); }
        std::span<uint8_t> tail() const { return area(pool_->cluster_, pool_->cluster_); }
        // A compressed cluster's aligned span (two clusters and an alignment on either side).
        std::span<uint8_t> compressed() const {
            return area(2 * pool_->cluster_, pool_->compressed_);
        }
        // The cluster it inflates to.
        std::span<uint8_t> cluster() const {
            return area(2 * pool_->cluster_ + pool_->compressed_, pool_->cluster_);
        }

      private:
        friend class ScratchPool;
        Lease(ScratchPool& pool, SlotPool::Slot slot) : pool_(&pool), slot_(std::move(slot)) {}
        std::span<uint8_t> area(uint64_t at, uint64_t bytes) const;

        ScratchPool* pool_;
        std::optional<SlotPool::Slot> slot_;  // released before the waiters hear of it
    };

    // A slot, waiting until one is free.
    Lease acquire();

  private:
    uint64_t cluster_;     // a cluster, rounded up to a page
    uint64_t compressed_;  // two clusters and two alignments, rounded up to a page
    SlotPool slots_;
    std::mutex mutex_;
    std::condition_variable released_;
};

}  // namespace mvmm::devices::block::qcow2
