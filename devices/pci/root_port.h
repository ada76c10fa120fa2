// A PCI Express root port: a type 1 bridge on the root bus with one slot behind it, as
// QEMU's pcie-root-port (IDs 1b36:000c).  The guest assigns its bus numbers and its memory,
// prefetchable (64-bit) and I/O windows; the bus asks forwards() whether an access reaches
// the slot.  No hot-plug (the slot is not hot-plug capable, so pciehp leaves it alone), no
// port interrupts (no MSI/INTx: portdrv finds no service it needs, see host_bridge.h).
#pragma once

#include <cstdint>

#include "devices/pci/config_space.h"
#include "devices/pci/pci_function.h"

namespace mvmm::devices::pci {

class RootPort final : public PciFunction {
  public:
    // `port_number` (1-255) goes to Link Capabilities and is the physical slot number.
    explicit RootPort(uint8_t port_number);

    void config_read(uint16_t offset, std::span<uint8_t> data) override;
    void config_write(uint16_t offset, std::span<const uint8_t> data) override;

    uint8_t secondary_bus() const { return config_.get<uint8_t>(reg::kSecondaryBus); }
    uint8_t subordinate_bus() const { return config_.get<uint8_t>(reg::kSubordinateBus); }
    // Whether an access of `kind` to [base, base + size) is forwarded to the secondary bus:
    // the command register enables it and one window holds the whole range.
    bool forwards(BarKind kind, uint64_t base, uint64_t size) const;

    // Reports a card in the slot (Presence Detect State, Data Link Layer Link Active).
    void set_slot_occupied();

  private:
    ConfigSpace config_;
    uint16_t express_;  // offset of the PCI Express capability
};

}  // namespace mvmm::devices::pci
