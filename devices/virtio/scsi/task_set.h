// The commands the driver has queued on a controller's request queues, as the control queue's
// task management functions see them (SAM-5, 7.1; virtio 1.2, 5.6.6.2).  A task is a chain
// the driver made available that has not completed: in the ring, or started and in flight
// (many per queue, completing in any order).  A TMF runs on the control queue's own thread;
// apply() records which chains it covers (those made available before it, by each request
// queue's available index), waits until each of them has completed, the matching ones that
// had not started answered ABORTED or RESET without running, and only then does the TMF
// complete, as Linux's virtscsi_tmf relies on: their used entries are in the ring.
//
// Positions: a request queue starts chains in ring order, so the n-th chain it starts since
// activation sat at available index n (TaskOrder numbers them).  Each queue publishes the
// first position still in flight, below which every chain's used entry is in the ring; it is
// written only by the context that runs that queue, and apply() reads it and the rings'
// indexes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "devices/virtio/virtio_device.h"
#include "mem/guest_memory.h"

namespace mvmm::devices::virtio::scsi {

// What becomes of a queued command that a task management function covers.
enum class TaskAction {
    Run,    // not covered, or only looked at (QUERY TASK)
    Abort,  // VIRTIO_SCSI_S_ABORTED: ABORT TASK, ABORT TASK SET, CLEAR TASK SET
    Reset,  // VIRTIO_SCSI_S_RESET: LOGICAL UNIT RESET, I_T NEXUS RESET
};

// Which commands a function covers.
struct TaskScope {
    enum Kind { Task, LogicalUnit, Target } kind = Task;
    uint8_t target = 0;
    uint16_t lun = 0;  // Task and LogicalUnit
    uint64_t tag = 0;  // Task

    bool covers(uint8_t command_target, uint16_t command_lun, uint64_t command_tag) const;
};

// A command of a request queue from its start to its used entry: its position and its place
// in the queue's list of commands in flight (in what the command lives in: nothing allocated).
struct Task {
    uint64_t position = 0;
    bool addressed = false;  // to a target the controller has: the next three are set
    uint8_t target = 0;
    uint16_t lun = 0;
    uint64_t tag = 0;
    Task* older = nullptr;
    Task* newer = nullptr;
};

// One request queue's commands in flight, oldest first; used by that queue's context only.
class TaskOrder {
  public:
    // Numbers `task` (the next position) and puts it last.
    void begin(Task& task) noexcept;
    // Takes `task` out; returns the first position still in flight (every one below it ended).
    uint64_t end(Task& task) noexcept;
    // Positions start again at 0 (activation); nothing may be in flight.
    void restart() noexcept { next_ = 0; }
    // For walking the commands in flight, oldest first.
    Task* oldest() const noexcept { return oldest_; }

  private:
    Task* oldest_ = nullptr;
    Task* newest_ = nullptr;
    uint64_t next_ = 0;
};

class TaskSet {
  public:
    explicit TaskSet(uint16_t request_queues);

    // Called by activate(), while no queue worker runs: request queue i's ring is
    // `queues[i]` (not ready: not used).  Returns false when a ready ring is not in `memory`
    // (the queue workers refuse it as well).
    bool activate(const GuestMemory& memory, std::span<const QueueConfig> queues);
    // Wakes a TMF waiting in apply(), which returns at once, as does every apply() until the
    // next activate(): the queues are being stopped.
    void stop();

    // On request queue `queue`'s context, once it started the chain at `position` (positions
    // below `position + 1` are started).
    void started(uint16_t queue, uint64_t position);
    // On the same context, before the chain at `task.position` runs: what to do with the
    // command `task` (addressed) carries.  Every chain the queue starts, framed or not, ends
    // with completed().
    TaskAction admit(uint16_t queue, const Task& task);
    // On the same context, after `task`'s used entry went into the ring: every chain of
    // `queue` before position `done_below` has completed.  A TMF waiting for it counts it as
    // covered when it is (QUERY TASK: it was in the task set).
    void completed(uint16_t queue, const Task& task, uint64_t done_below);

    // On the control queue's thread: applies `action` to every command `scope` covers that
    // the driver queued before this call, and returns once each command queued before it is
    // back in its used ring.  Returns whether any command was covered (QUERY TASK's answer).
    bool apply(const TaskScope& scope, TaskAction action);
    // Whether a TMF is waiting in apply() (for tests and statistics).
    bool applying() const noexcept { return applying_.load(); }

  private:
    struct Ring {
        std::optional<GuestSlice> avail;  // {flags, idx}
        std::optional<GuestSlice> used;   // {flags, idx}
        uint16_t size = 0;
    };
    std::vector<Ring> rings_;
    // Per queue, the chains started and the first position still in flight (its context
    // writes, apply() reads).
    std::unique_ptr<std::atomic<uint64_t>[]> started_;
    std::unique_ptr<std::atomic<uint64_t>[]> done_below_;
    std::atomic<bool> applying_{false};  // a TMF is recorded: admit() must look
    std::mutex mutex_;
    std::condition_variable progress_;
    bool stopped_ = false;            // by mutex_
    std::optional<TaskScope> scope_;  // by mutex_: the function being applied
    TaskAction action_ = TaskAction::Run;
    // Per queue, the first position a TMF does not cover: written by apply() under mutex_.
    std::vector<uint64_t> limits_;
    bool covered_ = false;  // by mutex_
};

}  // namespace mvmm::devices::virtio::scsi
