// The virtio 1.x transport state behind the virtio-pci common configuration structure
// (virtio 1.2, 4.1.4.3): feature negotiation, the device status state machine, per-queue
// set-up, and the device's interrupts.  Modern only: VERSION_1 is required.
//
// Threads: vCPUs call the read/write methods (serialized by a mutex); the device's I/O threads
// call notify_queue()/notify_config(), which take no lock the vCPU side holds while it calls
// into the device, so Device::reset() may wait for an I/O thread that is notifying.
#pragma once

#include <linux/virtio_config.h>
#include <linux/virtio_pci.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "base/fd.h"
#include "devices/pci/msix.h"
#include "devices/virtio/virtio_device.h"
#include "mem/guest_memory.h"

namespace mvmm::devices::virtio::pci {

namespace status {
inline constexpr uint8_t kAcknowledge = VIRTIO_CONFIG_S_ACKNOWLEDGE;
inline constexpr uint8_t kDriver = VIRTIO_CONFIG_S_DRIVER;
inline constexpr uint8_t kDriverOk = VIRTIO_CONFIG_S_DRIVER_OK;
inline constexpr uint8_t kFeaturesOk = VIRTIO_CONFIG_S_FEATURES_OK;
inline constexpr uint8_t kNeedsReset = VIRTIO_CONFIG_S_NEEDS_RESET;
inline constexpr uint8_t kFailed = VIRTIO_CONFIG_S_FAILED;
}  // namespace status

inline constexpr uint16_t kNoVector = VIRTIO_MSI_NO_VECTOR;

// struct virtio_pci_common_cfg, little-endian like the guest, with each 64-bit queue address as
// one field where <linux/virtio_pci.h> splits it into _lo and _hi (the asserts below hold the two
// layouts together).
struct CommonConfig {
    uint32_t device_feature_select;
    uint32_t device_feature;
    uint32_t driver_feature_select;
    uint32_t driver_feature;
    uint16_t config_msix_vector;
    uint16_t num_queues;
    uint8_t device_status;
    uint8_t config_generation;
    uint16_t queue_select;
    uint16_t queue_size;
    uint16_t queue_msix_vector;
    uint16_t queue_enable;
    uint16_t queue_notify_off;
    uint64_t queue_desc;
    uint64_t queue_driver;
    uint64_t queue_device;
};
static_assert(sizeof(CommonConfig) == sizeof(virtio_pci_common_cfg));
static_assert(offsetof(CommonConfig, driver_feature) ==
              offsetof(virtio_pci_common_cfg, guest_feature));
static_assert(offsetof(CommonConfig, config_msix_vector) ==
              offsetof(virtio_pci_common_cfg, msix_config));
static_assert(offsetof(CommonConfig, device_status) ==
              offsetof(virtio_pci_common_cfg, device_status));
static_assert(offsetof(CommonConfig, queue_notify_off) ==
              offsetof(virtio_pci_common_cfg, queue_notify_off));
static_assert(offsetof(CommonConfig, queue_desc) == offsetof(virtio_pci_common_cfg, queue_desc_lo));
static_assert(offsetof(CommonConfig, queue_driver) ==
              offsetof(virtio_pci_common_cfg, queue_avail_lo));
static_assert(offsetof(CommonConfig, queue_device) ==
              offsetof(virtio_pci_common_cfg, queue_used_lo));

class Transport final : public Interrupt {
  public:
    // `device` and `msix` must outlive the transport; `msix` has a vector for the config
    // interrupt and each queue.
    Transport(Device& device, const GuestMemory& memory, devices::pci::MsixTable& msix);

    // Accesses to the common configuration structure; bytes past its end read 0.
    void read_common(uint64_t offset, std::span<uint8_t> data);
    void write_common(uint64_t offset, std::span<const uint8_t> data);
    // The ISR status byte; reading it clears it.
    uint8_t read_isr() noexcept { return isr_.exchange(0); }
    // The driver notified `queue` (without an ioeventfd in between).
    void kick(uint16_t queue) const;
    const EventFd& kick_fd(uint16_t queue) const { return kicks_.at(queue); }
    uint16_t num_queues() const noexcept { return static_cast<uint16_t>(queues_.size()); }

    // Interrupt, for the device.  A device that sets needs_reset() calls notify_config().
    void notify_queue(uint16_t queue) override;
    void notify_config() override;

  private:
    struct Queue {
        uint16_t size = 0;
        bool enabled = false;
        uint64_t desc = 0;
        uint64_t driver = 0;
        uint64_t device = 0;
    };

    CommonConfig snapshot() const;  // requires mutex_
    uint8_t device_status() const;
    void write_status(uint8_t value);  // requires mutex_
    void reset();                      // requires mutex_
    void activate();                   // requires mutex_
    bool features_acceptable() const;  // requires mutex_
    uint16_t checked_vector(uint16_t vector) const;
    void set_queue_field(const CommonConfig& written, uint64_t offset, uint64_t size);

    Device& device_;
    const GuestMemory& memory_;
    devices::pci::MsixTable& msix_;
    std::vector<EventFd> kicks_;

    std::mutex mutex_;
    uint64_t offered_features_;
    uint32_t device_feature_select_ = 0;
    uint32_t driver_feature_select_ = 0;
    uint64_t driver_features_ = 0;
    uint8_t driver_status_ = 0;  // what the driver wrote
    uint16_t queue_select_ = 0;
    std::vector<Queue> queues_;
    bool failure_logged_ = false;  // warn about a failed activation once, then debug

    // Also touched by I/O threads.
    std::atomic<bool> needs_reset_{false};
    std::atomic<uint8_t> isr_{0};
    std::atomic<uint8_t> config_generation_{0};
    std::atomic<uint16_t> config_vector_{kNoVector};
    std::vector<std::atomic<uint16_t>> queue_vectors_;
};

}  // namespace mvmm::devices::virtio::pci
