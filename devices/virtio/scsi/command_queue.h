// One request queue of a virtio-scsi controller, many commands in flight: each chain is framed
// (request.h), addressed, checked against the task management function in progress
// (task_set.h) and by its target (parse, then execute: target.h) before anything runs.  READ,
// WRITE and SYNCHRONIZE CACHE then run as image operations through the LUN's IoQueue of this
// queue (aio=: ../../block/io_queue.h) and complete on the queue's context; every other
// command runs at once.  A command's state lives in its request slot (nothing allocated per
// command), with the TargetTable snapshot it holds until its response is written.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "base/fd.h"
#include "devices/block/io_queue.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/scsi/request.h"
#include "devices/virtio/scsi/target.h"
#include "devices/virtio/scsi/task_set.h"

namespace mvmm::devices::virtio::scsi {

// Per-controller counters, readable from any thread: the queue workers' and the commands'.
struct ScsiCounters : QueueCounters {
    std::atomic<uint64_t> bad_requests{0};      // unparsable framing: VIRTIO_SCSI_S_FAILURE
    std::atomic<uint64_t> bad_targets{0};       // another target: VIRTIO_SCSI_S_BAD_TARGET
    std::atomic<uint64_t> overruns{0};          // buffers that do not fit the CDB
    std::atomic<uint64_t> check_conditions{0};  // commands that failed with sense
    std::atomic<uint64_t> aborted{0};  // commands a TMF answered ABORTED or RESET before they ran
};

class CommandQueue final : public AsyncRequestHandler {
  public:
    // Request queue `queue` (0 first) of at most `depth` commands in flight.  The references
    // must outlive it; the LUNs' IoQueues of this queue must not (they signal its eventfd).
    CommandQueue(uint16_t queue, uint16_t depth, const TargetTable& targets, TaskSet& tasks,
                 ScsiCounters& counters);

    // At activation, while no worker runs: the driver's layout; positions start again at 0;
    // the LUNs present open their IoQueue of this queue.  Throws std::system_error when the
    // host refuses one (a ring, a thread).
    void activate(const Layout& layout);

    size_t state_bytes(uint16_t queue_size) const override;
    void start(InFlight& request) override;
    void progress() override;
    int completion_fd() const noexcept override { return completions_.get(); }

  private:
    struct Pending;
    void run(Pending& pending);
    void next(Pending& pending);
    void step_done(Pending& pending, const block::IoResult& result);
    void answer(Pending& pending, const TargetOutcome& result);
    void respond(Pending& pending, const CommandResponse& response, uint64_t data_in_written);
    void finish(Pending& pending, uint32_t written);

    const uint16_t queue_;
    const uint16_t depth_;
    const TargetTable& targets_;
    TaskSet& tasks_;
    ScsiCounters& counters_;
    Layout layout_;
    EventFd completions_;  // signalled by every LUN's IoQueue of this queue
    TaskOrder order_;      // the commands in flight
    // progress()'s: each IoQueue with operations in flight, and the snapshot that holds its
    // LUN (room for `depth` of them, reserved).
    std::vector<std::pair<block::IoQueue*, std::shared_ptr<const Targets>>> busy_;
};

}  // namespace mvmm::devices::virtio::scsi
