#include "devices/virtio/scsi/task_set.h"

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

void TaskOrder::begin(Task& task) noexcept {
    task.position = next_++;
    task.older = newest_;
    task.newer = nullptr;
    (newest_ ? newest_->newer : oldest_) = &task;
    newest_ = &task;
}

uint64_t TaskOrder::end(Task& task) noexcept {
    (task.older ? task.older->newer : oldest_) = task.newer;
    (task.newer ? task.newer->older : newest_) = task.older;
    return oldest_ ? oldest_->position : next_;
}

TaskSet::TaskSet(uint16_t request_queues)
    : rings_(request_queues),
      started_(std::make_unique<std::atomic<uint64_t>[]>(request_queues)),
      done_below_(std::make_unique<std::atomic<uint64_t>[]>(request_queues)),
      limits_(request_queues) {}

bool TaskSet::activate(const GuestMemory& memory, std::span<const QueueConfig> queues) {
    std::lock_guard lock(mutex_);
    stopped_ = false;
    for (size_t i = 0; i < rings_.size(); ++i) {
        rings_[i] = {};
        started_[i].store(0);
        done_below_[i].store(0);
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

TaskAction TaskSet::admit(uint16_t queue, const Task& task) {
    if (!applying_.load()) return TaskAction::Run;
    std::lock_guard lock(mutex_);
    if (!scope_ || task.position >= limits_[queue] ||
        !scope_->covers(task.target, task.lun, task.tag))
        return TaskAction::Run;
    covered_ = true;
    return action_;
}

void TaskSet::started(uint16_t queue, uint64_t position) {
    started_[queue].store(position + 1);
}

void TaskSet::completed(uint16_t queue, const Task& task, uint64_t done_below) {
    done_below_[queue].store(done_below);
    // Either apply() sees the new count, or this sees applying_ and wakes it: both are
    // sequentially consistent, and the notification is sent under the lock it waits with.
    if (applying_.load()) {
        std::lock_guard lock(mutex_);
        if (scope_ && task.addressed && task.position < limits_[queue] &&
            scope_->covers(task.target, task.lun, task.tag))
            covered_ = true;
        progress_.notify_all();
    }
}

bool TaskSet::apply(const TaskScope& scope, TaskAction action) {
    std::unique_lock lock(mutex_);
    if (stopped_) return false;
    for (size_t i = 0; i < rings_.size(); ++i) {
        // Chains started so far are below the limit; those queued after them are counted
        // from the ring, at most its size of them.
        const uint64_t start = started_[i].load();
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
            if (done_below_[i].load() < limits_[i]) return false;
        }
        return true;
    });
    applying_.store(false);
    scope_.reset();
    return covered_;
}

}  // namespace mvmm::devices::virtio::scsi
