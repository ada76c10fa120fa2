// The event queue (virtio 1.2, 5.6.6.3): the driver posts empty buffers on queue 1, and the
// device returns one with a virtio_scsi_event in it for each event.  With VIRTIO_SCSI_F_HOTPLUG
// a LUN added or removed is a TRANSPORT_RESET event with reason RESCAN or REMOVED for its
// target and LUN (Linux's virtio_scsi then adds or removes that one SCSI device).  An event
// that finds no buffer waits for one, up to kMaxPending; past that, events are dropped and the
// next event delivered carries VIRTIO_SCSI_T_EVENTS_MISSED, on which the driver rescans the
// whole host.
#pragma once

#include <linux/virtio_scsi.h>

#include <cstdint>
#include <deque>
#include <mutex>

#include "base/fd.h"
#include "devices/virtio/queue_worker.h"

namespace mvmm::devices::virtio::scsi {

class EventQueue final : public AsyncRequestHandler {
  public:
    static constexpr size_t kMaxPending = 64;

    // Queues a TRANSPORT_RESET event for `target`/`lun` with `reason` (VIRTIO_SCSI_EVT_RESET_*),
    // from any thread; it reaches the driver at its queue's next turn.
    void transport_reset(uint8_t target, uint16_t lun, uint32_t reason);
    // Drops the events not delivered (a reset of the device).
    void clear();
    // The driver's buffers go back to it empty at the next progress(): the queue is stopping
    // (QueueWorkers::stop() waits for every request in flight, and these would never finish).
    void release();
    // Starts holding buffers again (activate).
    void resume();

    // AsyncRequestHandler, on the queue's context.
    void start(InFlight& buffer) override;
    void progress() override { deliver(); }
    int completion_fd() const noexcept override { return ready_.get(); }

  private:
    void deliver();

    EventFd ready_;  // an event was queued, or the buffers are to be released
    mutable std::mutex mutex_;
    std::deque<virtio_scsi_event> pending_;  // by mutex_
    bool dropped_ = false;                   // by mutex_: the next event says EVENTS_MISSED
    bool releasing_ = false;                 // by mutex_
    std::deque<InFlight*> buffers_;          // the driver's, on the queue's context only
};

}  // namespace mvmm::devices::virtio::scsi
