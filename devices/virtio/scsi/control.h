// The control queue (virtio 1.2, 5.6.6.2): task management functions and asynchronous
// notification queries.  A TMF is applied to the commands queued on the request queues
// (task_set.h): ABORT TASK, ABORT TASK SET and CLEAR TASK SET answer the commands they cover
// ABORTED, LOGICAL UNIT RESET and I_T NEXUS RESET answer them RESET and reset the LUNs (a unit
// attention each), QUERY TASK and QUERY TASK SET report whether such a command was queued; the
// TMF completes after every command queued before it.  No asynchronous notification is
// supported: queries and subscriptions get an empty event mask.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "devices/virtio/queue_worker.h"
#include "devices/virtio/scsi/request.h"
#include "devices/virtio/scsi/target.h"
#include "devices/virtio/scsi/task_set.h"

namespace mvmm::devices::virtio::scsi {

class ControlHandler final : public RequestHandler {
  public:
    // `targets`, `tasks` and `bad_requests` must outlive the handler.  It blocks its thread
    // while a TMF waits for the request queues: give the control queue a thread of its own.
    ControlHandler(const TargetTable& targets, TaskSet& tasks, std::atomic<uint64_t>& bad_requests);

    uint32_t handle(const DescriptorChain& chain) override;

    uint64_t task_management_functions() const { return tmfs_.load(); }

  private:
    uint32_t task_management(const DescriptorChain& chain);
    uint8_t carry_out(uint32_t subtype, const std::optional<LunAddress>& lun, uint64_t tag);
    uint32_t async_notification(const DescriptorChain& chain);
    uint32_t bad_request();

    const TargetTable& targets_;
    TaskSet& tasks_;
    std::atomic<uint64_t>& bad_requests_;
    std::atomic<uint64_t> tmfs_{0};
};

}  // namespace mvmm::devices::virtio::scsi
