// The commands the driver has queued on a controller's request queues, as the control queue's
// task management functions see them (SAM-5, 7.1; virtio 1.2, 5.6.6.2).  Commands run to
// completion one at a time per queue, so a task is a chain the driver made available that its
// queue has not handled yet: in the ring, or popped into the current batch.  A TMF runs on the
// control queue's own thread; apply() records which chains it covers (those made available
// before it, by each request queue's available index), waits until each of them has been
// handled, the matching ones answered ABORTED or RESET without running, and until their used
// entries are in the ring, and only then does the TMF complete, as Linux's virtscsi_tmf relies
// on.
//
// Positions: a request queue handles chains in ring order, so the n-th chain it handles since
// activation sat at available index n.  Each queue's count is written only by the thread that
// runs that queue; apply() reads the counts and the rings' indexes.
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

    // On request queue `queue`'s thread, before its next chain runs: what to do with the
    // command it carries.  Every chain the queue handles, framed or not, ends with handled().
    TaskAction admit(uint16_t queue, uint8_t target, uint16_t lun, uint64_t tag);
    // The chain is handled; its used entry follows at once, on the same thread.
    void handled(uint16_t queue);

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
    void wait_for_used() const;

    std::vector<Ring> rings_;
    // Chains each queue handled since activation (its thread writes, apply() reads).
    std::unique_ptr<std::atomic<uint64_t>[]> handled_;
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
