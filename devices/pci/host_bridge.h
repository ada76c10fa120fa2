// The PCI Express host bridge: what vmm/ builds a PCI topology with.
//
//   PciHostBridge pci(layout, mmio, pio, platform, reset_port); // ECAM + 0xCF8/0xCFC, 00:00.0
//   pci.attach(virtio_blk, NewRootPort{});            // a root port, the disk behind it
//   pci.attach(other, RootBusSlot{});                 // directly on bus 0
//   pci.add_empty_root_port();                        // a root port with nothing behind it
//   pci.plug(port, function);                         // hot-plug into an empty port's slot
//   pci.request_unplug(port);                         // ask the guest to release it
//
// - Config space: ECAM at layout.ecam_base (1 MiB per bus, MCFG) and the legacy ports
//   0xCF8/0xCFC (config_access.h).  Absent functions read all-ones.  00:00.0 is a host bridge
//   function, 1b36:0008 (Red Hat's "QEMU PCIe host bridge" ID), class 0x060000.
// - Root ports (1b36:000c, see root_port.h) take root-bus functions in order, eight per slot
//   (QEMU's addr=S.F,multifunction=on), so slots 1-31 hold up to 248 ports; the device goes to
//   00.0 behind its port.  The guest assigns bus numbers and bridge windows (Linux does this
//   itself when no firmware did).
// - BARs decode only inside the layout's windows, with decoding enabled and every bridge on
//   the way forwarding them; that keeps a guest from shadowing platform devices.
// - Lifetime: destroy after the vCPUs stopped; it unmaps what it mapped.  Thread-safe: config
//   cycles from several vCPUs are serialized by one lock.
//
// - Hot-plug: every root port's slot is hot-pluggable (root_port.h).  plug() puts a function
//   into an empty slot and tells the guest; request_unplug() presses the slot's attention
//   button; once the guest powers the slot off, the function leaves the bus (its BARs leave
//   the address spaces, no access reaches it any more) and goes to the unplug handler, which
//   owns it from then on.  A port is free again once the guest has also turned its power
//   indicator off (pciehp's last step after a removal: it ignores slot events until then).
//
// What the guest needs from ACPI (vmm/acpi): MCFG for the ECAM range; the host bridge
// (PNP0A08) with _CRS = bus range 0..ecam_buses-1, layout.io, layout.mmio32, layout.mmio64;
// the ECAM range reserved (PNP0C02 or E820); _OSC granting native PCIe hot-plug (and what else
// the OS asks for), without which Linux leaves the slots to firmware.  No _PRT: no function
// uses INTx (MSI-X, and MSI for the root ports).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "devices/bus/address_space.h"
#include "devices/pci/bus.h"
#include "devices/pci/config_access.h"
#include "devices/pci/pci_function.h"
#include "devices/platform.h"

namespace mvmm::devices::pci {

struct AddressWindow {
    uint64_t base = 0;
    uint64_t size = 0;
    uint64_t last() const { return base + size - 1; }
    // Whether [start, start + length) lies inside the window.
    bool contains(uint64_t start, uint64_t length) const {
        return length != 0 && start >= base && length <= size && start - base <= size - length;
    }
};

// The host bridge's part of the machine's memory map (vmm/layout.h owns the values).
struct PciLayout {
    GuestAddr ecam_base;
    uint16_t ecam_buses = 256;  // ECAM spans ecam_buses MiB: buses 0..ecam_buses-1
    AddressWindow mmio32;       // below 4 GiB, for 32-bit and non-prefetchable BARs
    AddressWindow mmio64;       // above RAM, for 64-bit BARs
    AddressWindow io;           // I/O ports, at most 0x10000
    void validate() const;      // throws std::invalid_argument
};

// Directly on the root bus at `device`.`function`; the lowest empty slot when no device is
// given.  A slot's function 0 must be attached for the guest to look at its other functions.
struct RootBusSlot {
    std::optional<uint8_t> device;
    uint8_t function = 0;
};
// Behind a new root port, as device 0 function 0 of the port's secondary bus.
struct NewRootPort {};
using Placement = std::variant<RootBusSlot, NewRootPort>;

// A root-bus location: the function itself, or the root port in front of it.
struct RootBusAddress {
    uint8_t device = 0;
    uint8_t function = 0;
    uint8_t port = 0;  // the root port's number (its physical slot); 0 on the root bus
};

// A root port's slot as the host sees it.
struct SlotState {
    uint8_t port = 0;
    bool occupied = false;
    bool powered = false;
    bool unplug_requested = false;  // the attention button was pressed; the guest has not
                                    // released the function yet
    bool free = false;              // a plug() would take it
};

// Functions attached with RootBusSlot{} take a root-bus slot each, root ports share slots
// eight to one, in slots 1-31 (at most 248 ports).  Whether that many of each fit, in any order.
bool fits_on_root_bus(unsigned slot_functions, unsigned root_ports);

class PciHostBridge final : public ConfigCycles {
  public:
    // `reset_control` receives byte accesses to port 0xCF9, the chipset's reset control
    // register, which shares its dword with CONFIG_ADDRESS (offset 0 in the handler).
    // `platform` gives the root ports their MSI vectors.
    PciHostBridge(const PciLayout& layout, MmioSpace& mmio, PioSpace& pio, Platform& platform,
                  std::shared_ptr<IoHandler> reset_control = nullptr);
    ~PciHostBridge() override;
    PciHostBridge(const PciHostBridge&) = delete;
    PciHostBridge& operator=(const PciHostBridge&) = delete;

    // Throws std::runtime_error when the placement is taken or the root bus is full.
    RootBusAddress attach(std::shared_ptr<PciFunction> function, Placement placement);
    // A root port with an empty slot, as QEMU's pcie-root-port without a device; it counts
    // as a root port for fits_on_root_bus.  Throws std::runtime_error when the bus is full.
    RootBusAddress add_empty_root_port();

    const PciLayout& layout() const noexcept { return layout_; }

    // Receives each function the guest released, with its port, under the bridge's lock (from
    // a vCPU's config write): it must not call back into the bridge, and should hand the
    // function to another thread to destroy.  Set before the guest runs.
    using UnplugHandler = std::function<void(uint8_t port, std::shared_ptr<PciFunction>)>;
    void set_unplug_handler(UnplugHandler handler);
    // Hot-plug into root port `port`'s slot; throws std::runtime_error unless that slot is free.
    void plug(uint8_t port, std::shared_ptr<PciFunction> function);
    // Presses the attention button of `port`'s slot; throws std::runtime_error when the slot
    // is empty or a request is pending.  A slot the guest never powered on is released at once.
    void request_unplug(uint8_t port);
    // The root ports' slots, in port order.
    std::vector<SlotState> slots() const;

    // One config cycle, as ECAM and CONFIG_DATA issue them (offset + size <= 4096).
    void config_read(uint8_t bus, uint8_t devfn, uint16_t offset, std::span<uint8_t> data) override;
    void config_write(uint8_t bus, uint8_t devfn, uint16_t offset,
                      std::span<const uint8_t> data) override;

  private:
    RootBusAddress next_free_slot() const;
    RootBusAddress next_port_location() const;
    RootBusAddress add_root_port(std::shared_ptr<PciFunction> function);  // holds mutex_
    struct Port {
        std::shared_ptr<RootPort> port;
        PciBus* secondary;
        bool unplug_requested = false;
    };
    Port& port(uint8_t number);  // holds mutex_; throws for an unknown number
    void release(Port& port);    // holds mutex_
    static bool is_free(const Port& port);

    PciLayout layout_;
    MmioSpace& mmio_;
    PioSpace& pio_;
    Platform& platform_;
    mutable std::mutex mutex_;
    PciBus root_;
    std::vector<Port> ports_;  // by number - 1
    UnplugHandler on_unplug_;
    RegionId ecam_region_;
    RegionId legacy_region_;
};

}  // namespace mvmm::devices::pci
