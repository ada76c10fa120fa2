#include "devices/virtio/queue_counters.h"

#include <utility>

namespace mvmm::devices::virtio {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<ThreadAllocations> installed_counter{nullptr};

// Keeps the first time only; a relaxed load first, so later calls cost no clock read.
void record_first(std::atomic<int64_t>& at) noexcept {
    if (at.load(std::memory_order_relaxed) != 0) return;
    int64_t never = 0;
    at.compare_exchange_strong(never, Clock::now().time_since_epoch().count(),
                               std::memory_order_relaxed);
}

std::optional<Clock::time_point> time_of(const std::atomic<int64_t>& at) noexcept {
    const int64_t ticks = at.load(std::memory_order_relaxed);
    if (ticks == 0) return std::nullopt;
    return Clock::time_point(Clock::duration(ticks));
}

}  // namespace

void count_heap_allocations_with(ThreadAllocations count) noexcept {
    installed_counter.store(count);
}

CountedAllocations::CountedAllocations(QueueRequests& requests) noexcept
    : requests_(requests),
      count_(installed_counter.load(std::memory_order_relaxed)),
      counted_to_(count_ ? count_() : 0) {}

void CountedAllocations::update() noexcept {
    if (!count_) return;
    const uint64_t now = count_();
    requests_.heap_allocations.fetch_add(now - std::exchange(counted_to_, now),
                                         std::memory_order_relaxed);
}

void QueueCounters::record_used(uint16_t queue) noexcept {
    using namespace std::chrono;
    const auto us = duration_cast<microseconds>(Clock::now().time_since_epoch()).count();
    last_used_.store(static_cast<uint64_t>(us) << 16 | queue, std::memory_order_relaxed);
}

std::optional<LastUsed> QueueCounters::last_used() const noexcept {
    using namespace std::chrono;
    const uint64_t word = last_used_.load(std::memory_order_relaxed);
    if (word == 0) return std::nullopt;
    return LastUsed{static_cast<uint16_t>(word & 0xffff),
                    Clock::time_point(microseconds(word >> 16))};
}

void QueueCounters::record_driver_ok() noexcept {
    record_first(driver_ok_);
}

void QueueCounters::record_notify() noexcept {
    record_first(first_notify_);
}

void QueueCounters::publish_queues(std::vector<std::shared_ptr<const QueueRequests>> queues) {
    std::lock_guard lock(mutex_);
    queues_ = std::move(queues);
}

DeviceStatistics QueueCounters::statistics() const {
    DeviceStatistics statistics{time_of(driver_ok_), time_of(first_notify_), {}};
    std::vector<std::shared_ptr<const QueueRequests>> queues;
    {
        std::lock_guard lock(mutex_);
        queues = queues_;  // mincore() below runs without the lock
    }
    const bool counted = installed_counter.load() != nullptr;
    for (size_t i = 0; i < queues.size(); ++i) {
        if (!queues[i]) continue;
        const SlotPool& pool = queues[i]->pool;
        statistics.queues.push_back(
            {.queue = static_cast<uint16_t>(i),
             .request_alloc = pool.source(),
             .slots = pool.capacity(),
             .peak_slots_in_use = pool.peak_in_use(),
             .pool_resident_bytes = pool.resident_bytes(),
             .heap_allocations =
                 counted ? std::optional(queues[i]->heap_allocations.load()) : std::nullopt});
    }
    return statistics;
}

}  // namespace mvmm::devices::virtio
