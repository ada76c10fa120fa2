// The seam between a virtio transport (virtio-pci) and a virtio device (blk, scsi):
// features, config space, activate, reset.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "base/fd.h"
#include "mem/guest_addr.h"
#include "mem/guest_memory.h"

namespace mvmm::devices::virtio {

// Feature bits every modern device offers or the transport handles.
inline constexpr uint64_t kFeatureIndirectDesc = 1ull << 28;
inline constexpr uint64_t kFeatureEventIdx = 1ull << 29;
inline constexpr uint64_t kFeatureVersion1 = 1ull << 32;

// One queue as the driver configured it through the transport.
struct QueueConfig {
    uint16_t size = 0;
    GuestAddr desc;
    GuestAddr avail;  // the driver area
    GuestAddr used;   // the device area
    bool ready = false;
};

// How a device tells the driver about used buffers or a config change.  Devices call both
// from their I/O threads, holding a queue lock that Device::reset() waits for: both must be
// thread-safe and must not wait for anything a caller of reset() or activate() holds.
class Interrupt {
  public:
    virtual ~Interrupt() = default;
    virtual void notify_queue(uint16_t queue) = 0;
    virtual void notify_config() = 0;  // also sent when the device starts to need a reset
};

struct ActivateContext {
    const GuestMemory& memory;
    uint64_t features;                  // negotiated
    std::vector<QueueConfig> queues;    // one per device queue; only ready ones are used
    std::vector<const EventFd*> kicks;  // per queue: signalled when the driver notifies
    Interrupt& interrupt;
};

class Device {
  public:
    virtual ~Device() = default;
    virtual uint32_t device_id() const = 0;  // virtio device type: 2 = block, 8 = scsi
    virtual uint64_t features() const = 0;   // offered, including transport bits
    virtual uint16_t num_queues() const = 0;
    virtual uint16_t max_queue_size() const = 0;
    virtual void read_config(uint64_t offset, std::span<uint8_t> data) const = 0;
    virtual void write_config(uint64_t offset, std::span<const uint8_t> data) = 0;
    // Called when the driver sets DRIVER_OK.  Returns false (and logs why) when the queues are
    // unusable; the transport then sets DEVICE_NEEDS_RESET.
    virtual bool activate(ActivateContext context) = 0;
    // The driver wrote 0 to device_status: stop all queue processing before returning.
    // Called from a vCPU or the main thread, never from a device's I/O thread.
    virtual void reset() = 0;
    // Set by the device when it hits a corrupt ring; the transport reports NEEDS_RESET.
    virtual bool needs_reset() const = 0;
};

// A read of a device's config space `config` at `offset`: bytes past its end read 0.
inline void read_config_space(std::span<const uint8_t> config, uint64_t offset,
                              std::span<uint8_t> data) {
    std::ranges::fill(data, 0);
    if (offset >= config.size()) return;
    const size_t n = std::min<uint64_t>(data.size(), config.size() - offset);
    std::copy_n(config.begin() + static_cast<ptrdiff_t>(offset), n, data.begin());
}

}  // namespace mvmm::devices::virtio
