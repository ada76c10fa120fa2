#include "devices/virtio/scsi/task_set.h"

#include <thread>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint64_t kIdxOffset = 2;  // after the flags, in both the driver and the device area

}  // namespace

bool TaskScope::covers(uint8_t command_target, uint16_t command_lun, uint64_t command_tag) const {
    if (command_target != target) return false;
    switch (kind) {
        case Task:
            return command_lun == lun && command_tag == tag;
        case LogicalUnit:
            return command_lun == lun;
        case Target:
            return true;
    }
    return false;
}

TaskSet::TaskSet(uint16_t request_queues)
    : rings_(request_queues),
      handled_(std::make_unique<std::atomic<uint64_t>[]>(request_queues)),
      limits_(request_queues) {}

bool TaskSet::activate(const GuestMemory& memory, std::span<const QueueConfig> queues) {
    std::lock_guard lock(mutex_);
    stopped_ = false;
    for (size_t i = 0; i < rings_.size(); ++i) {
        rings_[i] = {};
        handled_[i].store(0);
        if (i >= queues.size() || !queues[i].ready) continue;
        auto avail = memory.slice(queues[i].avail, 4);
        auto used = memory.slice(queues[i].used, 4);
        if (!avail || !used) return false;
        rings_[i] = {*avail, *used, queues[i].size};
    }
    return true;
}

void TaskSet::stop() {
    {
        std::lock_guard lock(mutex_);
        stopped_ = true;
    }
    progress_.notify_all();
}

TaskAction TaskSet::admit(uint16_t queue, uint8_t target, uint16_t lun, uint64_t tag) {
    if (!applying_.load()) return TaskAction::Run;
    std::lock_guard lock(mutex_);
    if (!scope_ || handled_[queue].load() >= limits_[queue] || !scope_->covers(target, lun, tag))
        return TaskAction::Run;
    covered_ = true;
    return action_;
}

void TaskSet::handled(uint16_t queue) {
    handled_[queue].fetch_add(1);
    // Either apply() sees the new count, or this sees applying_ and wakes it: both are
    // sequentially consistent, and the notification is sent under the lock it waits with.
    if (applying_.load()) {
        std::lock_guard lock(mutex_);
        progress_.notify_all();
    }
}

bool TaskSet::apply(const TaskScope& scope, TaskAction action) {
    std::unique_lock lock(mutex_);
    if (stopped_) return false;
    for (size_t i = 0; i < rings_.size(); ++i) {
        const uint64_t start = handled_[i].load();
        limits_[i] = start;
        if (!rings_[i].avail) continue;
        const auto published =
            rings_[i].avail->load<uint16_t>(kIdxOffset, std::memory_order_acquire);
        const auto queued = static_cast<uint16_t>(published - static_cast<uint16_t>(start));
        // More than the ring holds is a corrupt index: its worker stops the queue instead.
        if (queued <= rings_[i].size) limits_[i] = start + queued;
    }
    scope_ = scope;
    action_ = action;
    covered_ = false;
    applying_.store(true);
    progress_.wait(lock, [&] {
        if (stopped_) return true;
        for (size_t i = 0; i < rings_.size(); ++i) {
            if (handled_[i].load() < limits_[i]) return false;
        }
        return true;
    });
    applying_.store(false);
    scope_.reset();
    const bool covered = covered_;
    if (stopped_) return covered;
    lock.unlock();
    wait_for_used();  // limits_ has no other writer than this thread
    return covered;
}

// Each chain's used entry is pushed by its queue's thread right after handled(), with no wait
// in between: a yield loop for those few instructions, not a sleep.
void TaskSet::wait_for_used() const {
    for (size_t i = 0; i < rings_.size(); ++i) {
        if (!rings_[i].used) continue;
        const auto limit = static_cast<uint16_t>(limits_[i]);
        auto behind = [&] {
            const auto used = rings_[i].used->load<uint16_t>(kIdxOffset, std::memory_order_acquire);
            // Behind the limit by at most the ring's size; anything else is at or past it.
            return static_cast<uint16_t>(limit - used) != 0 &&
                   static_cast<uint16_t>(limit - used) <= rings_[i].size;
        };
        while (behind()) std::this_thread::yield();
    }
}

}  // namespace mvmm::devices::virtio::scsi
