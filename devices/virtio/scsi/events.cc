#include "devices/virtio/scsi/events.h"

#include <span>

#include "devices/virtio/scsi/responses.h"

namespace mvmm::devices::virtio::scsi {

void EventQueue::transport_reset(uint8_t target, uint16_t lun, uint32_t reason) {
    virtio_scsi_event event{};  // little-endian fields, like the host
    event.event = VIRTIO_SCSI_T_TRANSPORT_RESET;
    event.reason = reason;
    const auto address = single_level_lun(lun);
    event.lun[0] = 1;
    event.lun[1] = target;
    event.lun[2] = address[0];
    event.lun[3] = address[1];
    {
        std::lock_guard lock(mutex_);
        if (pending_.size() < kMaxPending) {
            pending_.push_back(event);
        } else {
            dropped_ = true;
        }
    }
    ready_.signal();
}

void EventQueue::clear() {
    std::lock_guard lock(mutex_);
    pending_.clear();
    dropped_ = false;
}

void EventQueue::release() {
    {
        std::lock_guard lock(mutex_);
        releasing_ = true;
    }
    ready_.signal();
}

void EventQueue::resume() {
    std::lock_guard lock(mutex_);
    releasing_ = false;
}

void EventQueue::start(InFlight& buffer) {
    buffers_.push_back(&buffer);
    deliver();
}

void EventQueue::deliver() {
    std::unique_lock lock(mutex_);
    while (!buffers_.empty() && (releasing_ || !pending_.empty() || dropped_)) {
        InFlight& buffer = *buffers_.front();
        buffers_.pop_front();
        if (releasing_) {
            buffer.complete(0);
            continue;
        }
        virtio_scsi_event event{};  // VIRTIO_SCSI_T_NO_EVENT when only the drop is to be said
        if (!pending_.empty()) {
            event = pending_.front();
            pending_.pop_front();
        }
        if (dropped_) event.event |= VIRTIO_SCSI_T_EVENTS_MISSED;
        dropped_ = false;
        // A buffer too small for an event gets what fits (the driver's mistake: it asked
        // event_info_size bytes).
        const auto bytes = std::span(reinterpret_cast<const uint8_t*>(&event), sizeof event);
        const uint64_t written = buffer.chain().writable.copy_from(0, bytes);
        buffer.complete(static_cast<uint32_t>(written));
    }
}

}  // namespace mvmm::devices::virtio::scsi
