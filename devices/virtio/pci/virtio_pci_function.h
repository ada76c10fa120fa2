// A virtio device on PCI: the modern (virtio 1.x only) virtio-pci transport, virtio 1.2 4.1.
//
//   IDs      1af4:(0x1040 + device type), revision 1, subsystem 1af4:1100 (as QEMU); no INTx.
//   BAR 0    one 64-bit, non-prefetchable memory BAR (reads of ISR have side effects):
//              0x0000 common configuration    0x3000 notifications, 4 bytes per queue
//              0x1000 ISR status              0x4000 MSI-X table, then the PBA
//              0x2000 device configuration
//   Caps     MSI-X (queues + 1 vectors: the config vector plus one per queue), then the
//            vendor capabilities for common, notify (multiplier 4), ISR, device config and
//            PCI config access (cfg_type 1, 2, 3, 4, 5).
//
// Each queue's kick is an EventFd: while the BAR is mapped it is registered as an ioeventfd on
// the queue's notify address (moved with the BAR), so KVM signals it without an exit; a notify
// write that does reach the handler (tests, or a write of another size) signals it directly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "devices/pci/config_space.h"
#include "devices/pci/msix.h"
#include "devices/pci/pci_function.h"
#include "devices/platform.h"
#include "devices/virtio/pci/transport.h"
#include "devices/virtio/virtio_device.h"
#include "mem/guest_memory.h"

namespace mvmm::devices::virtio::pci {

class VirtioPciFunction final : public devices::pci::PciFunction {
  public:
    static constexpr uint64_t kCommonOffset = 0x0000;
    static constexpr uint64_t kIsrOffset = 0x1000;
    static constexpr uint64_t kDeviceOffset = 0x2000;
    static constexpr uint64_t kNotifyOffset = 0x3000;
    static constexpr uint64_t kMsixTableOffset = 0x4000;
    static constexpr uint32_t kNotifyMultiplier = 4;
    static constexpr uint16_t kMaxQueues = 1024;  // 4 KiB of notify addresses

    // `memory` and `platform` must outlive the function.  Throws for a device with no queues
    // or more than kMaxQueues.
    VirtioPciFunction(std::unique_ptr<Device> device, Platform& platform,
                      const GuestMemory& memory);
    ~VirtioPciFunction() override;

    void config_read(uint16_t offset, std::span<uint8_t> data) override;
    void config_write(uint16_t offset, std::span<const uint8_t> data) override;
    std::vector<devices::pci::Bar> bars() const override { return {bar_}; }
    void bar_mapped(uint8_t index, std::optional<uint64_t> base) override;

    // Guest accesses to BAR 0 (its MMIO handler, and the PCI config access capability).
    void bar_read(uint64_t offset, std::span<uint8_t> data);
    void bar_write(uint64_t offset, std::span<const uint8_t> data);

  private:
    uint16_t add_vendor_capability(uint8_t cfg_type, uint8_t length, uint64_t offset,
                                   uint64_t size);
    struct BarWindow {
        uint64_t offset;
        uint32_t length;
    };
    // The BAR access a config access of `size` bytes at `offset` makes through the PCI
    // config access capability's pci_cfg_data: none unless it touches that field and the
    // capability describes 1, 2 or 4 aligned bytes inside BAR 0.
    std::optional<BarWindow> config_access(uint16_t offset, size_t size) const;
    void add_ioeventfds();
    void remove_ioeventfds();
    GuestAddr notify_address(uint16_t queue) const;

    Platform& platform_;
    std::unique_ptr<Device> device_;
    devices::pci::MsixTable msix_;
    Transport transport_;
    devices::pci::ConfigSpace config_;
    devices::pci::Bar bar_;
    uint64_t pba_offset_;
    uint16_t config_access_cap_ = 0;
    std::optional<uint64_t> bar_base_;  // where the BAR is mapped
    std::vector<bool> ioeventfds_;      // per queue: registered at its notify address
};

}  // namespace mvmm::devices::virtio::pci
