// The control queue (virtio 1.2, 5.6.6.2): task management functions and asynchronous
// notification queries.  Commands run to completion on their I/O thread, so there is never a
// task to abort: a TMF waits for the commands in flight on every request queue (the spec
// wants them complete when the TMF completes) and reports FUNCTION COMPLETE.  No asynchronous
// notification is supported: queries and subscriptions get an empty event mask.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>

#include "devices/virtio/queue_worker.h"
#include "devices/virtio/scsi/target.h"

namespace mvmm::devices::virtio::scsi {

class ControlHandler final : public RequestHandler {
  public:
    // `in_flight` is held shared by every command that runs; `target`, `in_flight` and
    // `bad_requests` must outlive the handler.
    ControlHandler(const Target& target, std::shared_mutex& in_flight,
                   std::atomic<uint64_t>& bad_requests);

    uint32_t handle(const DescriptorChain& chain) override;

    uint64_t task_management_functions() const { return tmfs_.load(); }

  private:
    uint32_t task_management(const DescriptorChain& chain);
    uint32_t async_notification(const DescriptorChain& chain);
    uint32_t bad_request();

    const Target& target_;
    std::shared_mutex& in_flight_;
    std::atomic<uint64_t>& bad_requests_;
    std::atomic<uint64_t> tmfs_{0};
};

}  // namespace mvmm::devices::virtio::scsi
