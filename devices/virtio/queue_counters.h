// What the queue workers of one device report, readable from any thread: request counters, the
// last chain returned (crash dumps), and the statistics a boot report shows: each queue's
// request pool, the heap allocations its work made, and when the driver set DRIVER_OK and
// first notified.  The workers write; vmm reads through the device's counters().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "mem/slot_pool.h"

namespace mvmm::devices::virtio {

// Heap allocations the calling thread has made so far, as an allocation hook linked into the
// program counts them (tools/bench/alloc_counter.cc has one).  mvmm links none, and sanitizer
// builds cannot (their runtime owns malloc): there the statistics say "not counted".
using ThreadAllocations = uint64_t (*)() noexcept;
// Installs `count` for every device, before any device is activated; nullptr removes it.
void count_heap_allocations_with(ThreadAllocations count) noexcept;

// One queue's request pool and the heap allocations its worker made, shared by the worker
// (which uses them) and the device's QueueCounters (which report them), so that a reset leaves
// the last activation's figures readable until the next activation replaces them.
struct QueueRequests {
    QueueRequests(size_t slot_size, uint32_t slots, SlotSource source)
        : pool(slot_size, slots, source) {}

    SlotPool pool;
    std::atomic<uint64_t> heap_allocations{0};  // counted while its worker's handlers ran
};

// Counts the heap allocations the calling thread makes while it lives into `requests`, when
// a counter is installed: at update() (before a chain goes back to the driver, so that what
// the driver sees done is counted) and when it goes.
class CountedAllocations {
  public:
    explicit CountedAllocations(QueueRequests& requests) noexcept;
    ~CountedAllocations() { update(); }
    CountedAllocations(const CountedAllocations&) = delete;
    CountedAllocations& operator=(const CountedAllocations&) = delete;

    void update() noexcept;

  private:
    QueueRequests& requests_;
    const ThreadAllocations count_;
    uint64_t counted_to_;
};

// A snapshot of one queue's requests, as its last activation left them.
struct QueueStatistics {
    uint16_t queue = 0;                           // the device's queue index
    SlotSource request_alloc = SlotSource::pool;  // where its requests in flight live
    uint32_t slots = 0;                           // one per ring entry: the queue's size
    uint32_t peak_slots_in_use = 0;               // the most requests in flight at once
    uint64_t pool_resident_bytes = 0;             // of the pool's mapping (mincore); 0 unless pool
    // Made on the queue's I/O thread while its worker ran (the request handler, the ring,
    // scheduling the next batch); nullopt when no counter is installed.
    std::optional<uint64_t> heap_allocations;
};

struct DeviceStatistics {
    // std::chrono::steady_clock (CLOCK_MONOTONIC) times; nullopt until it happens.
    std::optional<std::chrono::steady_clock::time_point> driver_ok;  // the first activation
    std::optional<std::chrono::steady_clock::time_point>
        first_notify;                     // the first kick a worker saw
    std::vector<QueueStatistics> queues;  // the queues a worker runs or ran, by index
};

// When a worker last returned a chain to the driver (wrote guest memory and the used ring).
struct LastUsed {
    uint16_t queue = 0;
    std::chrono::steady_clock::time_point at;
};

struct QueueCounters {
    std::atomic<uint64_t> requests{0};       // chains returned to the driver
    std::atomic<uint64_t> failed_queues{0};  // stopped by a corrupt ring (or a host error)
    std::atomic<bool> needs_reset{false};    // set with failed_queues; cleared by the device

    void record_used(uint16_t queue) noexcept;
    std::optional<LastUsed> last_used() const noexcept;  // nullopt: nothing returned yet

    // The workers' start(): the driver set DRIVER_OK.  Only the first time is kept.
    void record_driver_ok() noexcept;
    // A worker saw a kick.  Only the first is kept.
    void record_notify() noexcept;
    // The workers' start(): the queues of this activation, by index (nullptr: no worker).
    void publish_queues(std::vector<std::shared_ptr<const QueueRequests>> queues);

    // Any thread.  Throws std::system_error when mincore() fails (it does not on a mapping).
    DeviceStatistics statistics() const;

  private:
    // Microseconds of steady_clock << 16 | queue: one word, so a reader never pairs one
    // chain's queue with another's time.  0: never.
    std::atomic<uint64_t> last_used_{0};
    // steady_clock ticks (ns) since its epoch; 0: never.
    std::atomic<int64_t> driver_ok_{0};
    std::atomic<int64_t> first_notify_{0};
    mutable std::mutex mutex_;
    std::vector<std::shared_ptr<const QueueRequests>> queues_;  // guarded by mutex_
};

}  // namespace mvmm::devices::virtio
