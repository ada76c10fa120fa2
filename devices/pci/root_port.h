// A PCI Express root port: a type 1 bridge on the root bus with one hot-pluggable slot
// behind it, as QEMU's pcie-root-port (IDs 1b36:000c).  The guest assigns its bus numbers and
// its memory, prefetchable (64-bit) and I/O windows; the bus asks forwards() whether an access
// reaches the slot.
//
// Native hot-plug (PCIe Base 4.0, 6.7), what Linux's pciehp drives.  Slot Capabilities: Hot-Plug
// Capable, Attention Button, Power Controller, Attention and Power Indicators, physical slot
// number = port number; no MRL, no surprise removal, no electromechanical interlock, and
// Command Completed is implemented (No Command Completed Support is clear): every write to Slot
// Control completes at once and sets Command Completed, so pciehp never waits out its 1 s
// command timeout.  Events (Attention Button Pressed, Presence Detect Changed, Command
// Completed, Data Link Layer State Changed) interrupt through MSI when Hot-Plug Interrupt
// Enable and the event's enable are set: one message when the OR of enabled events goes from
// 0 to 1 (6.7.3.4), so the guest clears them all before the next one.
//   insert_card():   Presence Detect State and Data Link Layer Link Active set, PDC and DLLSC
//                    raised: pciehp (which enables DLLSC, not PDC, when there is a button)
//                    powers the slot on and scans it at once.
//   press_attention_button(): ABP raised: pciehp blinks the power indicator, waits 5 s (a
//                    second press cancels), unbinds the driver and powers the slot off.
//   Power Controller Control going to off while a card is present is the guest releasing it:
//                    the release handler runs (the owner detaches the card, then calls
//                    remove_card(), which clears both states and raises PDC and DLLSC).
// Not thread-safe: the host bridge serializes every call under its lock, the release handler
// runs under it too.
#pragma once

#include <cstdint>
#include <functional>

#include "devices/pci/config_space.h"
#include "devices/pci/msi.h"
#include "devices/pci/pci_function.h"
#include "devices/platform.h"

namespace mvmm::devices::pci {

class RootPort final : public PciFunction {
  public:
    // `port_number` (1-255) goes to Link Capabilities and is the physical slot number.
    // `platform` gives the port's MSI vector.
    RootPort(uint8_t port_number, Platform& platform);

    void config_read(uint16_t offset, std::span<uint8_t> data) override;
    void config_write(uint16_t offset, std::span<const uint8_t> data) override;

    uint8_t number() const noexcept { return number_; }
    uint8_t secondary_bus() const { return config_.get<uint8_t>(reg::kSecondaryBus); }
    uint8_t subordinate_bus() const { return config_.get<uint8_t>(reg::kSubordinateBus); }
    // Whether an access of `kind` to [base, base + size) is forwarded to the secondary bus:
    // the command register enables it and one window holds the whole range.
    bool forwards(BarKind kind, uint64_t base, uint64_t size) const;

    // A card in the slot from the start: present, link up, powered, power indicator on; no
    // events.
    void set_slot_occupied();
    // Hot-plug from the host side (see above).
    void insert_card();
    void remove_card();
    void press_attention_button();

    enum class Indicator : uint8_t { On = 1, Blink = 2, Off = 3 };
    bool occupied() const noexcept { return occupied_; }
    bool powered() const;
    Indicator power_indicator() const;

    // Called from config_write when the guest powers off the slot while a card is in it.
    void set_release_handler(std::function<void()> handler) { on_release_ = std::move(handler); }

  private:
    uint16_t slot_control() const;
    uint16_t slot_status() const;
    void set_slot_status(uint16_t value);
    void set_link_active(bool active);
    void raise(uint16_t events);
    bool interrupt_pending() const;
    void update_interrupt();

    ConfigSpace config_;
    MsiCapability msi_;
    uint8_t number_;
    uint16_t express_;  // offset of the PCI Express capability
    bool occupied_ = false;
    bool interrupt_pending_ = false;  // the OR of enabled events, as last seen
    std::function<void()> on_release_;
};

}  // namespace mvmm::devices::pci
