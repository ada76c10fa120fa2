// The PCI Express host bridge: what vmm/ builds a PCI topology with.
//
//   PciHostBridge pci(layout, mmio, pio, reset_port);   // ECAM + 0xCF8/0xCFC, 00:00.0
//   pci.attach(virtio_blk, NewRootPort{});            // a root port, the disk behind it
//   pci.attach(other, RootBusSlot{});                 // directly on bus 0
//   pci.add_empty_root_port();                        // a root port with nothing behind it
//
// - Config space: ECAM at layout.ecam_base (1 MiB per bus, MCFG) and the legacy
//   CONFIG_ADDRESS/CONFIG_DATA ports 0xCF8/0xCFC (dword address, byte/word/dword data).
//   Absent functions read all-ones.  00:00.0 is a host bridge function, 1b36:0008 (Red Hat's
//   "QEMU PCIe host bridge" ID), class 0x060000.
// - Root ports (1b36:000c, see root_port.h) take root-bus functions in order, eight per slot
//   (QEMU's addr=S.F,multifunction=on), so slots 1-31 hold up to 248 ports; the device goes to
//   00.0 behind its port.  The guest assigns bus numbers and bridge windows (Linux does this
//   itself when no firmware did).
// - BARs decode only inside the layout's windows, with decoding enabled and every bridge on
//   the way forwarding them; that keeps a guest from shadowing platform devices.
// - Lifetime: destroy after the vCPUs stopped; it unmaps what it mapped.  Thread-safe: config
//   cycles from several vCPUs are serialized by one lock.
//
// What the guest needs from ACPI (vmm/acpi): MCFG for the ECAM range; the host bridge
// (PNP0A08) with _CRS = bus range 0..ecam_buses-1, layout.io, layout.mmio32, layout.mmio64;
// the ECAM range reserved (PNP0C02 or E820).  No _PRT: no function uses INTx (MSI-X only).
// No _OSC is needed, and none should grant native PME/AER/hot-plug: the root ports have no
// interrupt for those services.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <variant>

#include "devices/bus/address_space.h"
#include "devices/pci/bus.h"
#include "devices/pci/pci_function.h"

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
};

// Functions attached with RootBusSlot{} take a root-bus slot each, root ports share slots
// eight to one, in slots 1-31 (at most 248 ports).  Whether that many of each fit, in any order.
bool fits_on_root_bus(unsigned slot_functions, unsigned root_ports);

class PciHostBridge {
  public:
    // `reset_control` receives byte accesses to port 0xCF9, the chipset's reset control
    // register, which shares its dword with CONFIG_ADDRESS (offset 0 in the handler).
    PciHostBridge(const PciLayout& layout, MmioSpace& mmio, PioSpace& pio,
                  std::shared_ptr<IoHandler> reset_control = nullptr);
    ~PciHostBridge();
    PciHostBridge(const PciHostBridge&) = delete;
    PciHostBridge& operator=(const PciHostBridge&) = delete;

    // Throws std::runtime_error when the placement is taken or the root bus is full.
    RootBusAddress attach(std::shared_ptr<PciFunction> function, Placement placement);
    // A root port with an empty slot, as QEMU's pcie-root-port without a device; it counts
    // as a root port for fits_on_root_bus.  Throws std::runtime_error when the bus is full.
    RootBusAddress add_empty_root_port();

    const PciLayout& layout() const noexcept { return layout_; }

    // One config cycle, as ECAM and CONFIG_DATA issue them (offset + size <= 4096).
    void config_read(uint8_t bus, uint8_t devfn, uint16_t offset, std::span<uint8_t> data);
    void config_write(uint8_t bus, uint8_t devfn, uint16_t offset, std::span<const uint8_t> data);

  private:
    RootBusAddress next_free_slot() const;
    RootBusAddress next_port_location() const;
    RootBusAddress add_root_port(std::shared_ptr<PciFunction> function);  // holds mutex_

    PciLayout layout_;
    MmioSpace& mmio_;
    PioSpace& pio_;
    std::mutex mutex_;
    PciBus root_;
    unsigned root_ports_ = 0;
    RegionId ecam_region_;
    RegionId legacy_region_;
};

}  // namespace mvmm::devices::pci
