// The PCI hierarchy below the host bridge: buses of functions, root ports leading to
// secondary buses, config cycles routed by the bus numbers the guest programmed, and the one
// place where BARs are mapped into the MMIO/PIO address spaces (sync_mappings).
// Not thread-safe: the host bridge serializes all calls.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "devices/bus/address_space.h"
#include "devices/pci/pci_function.h"
#include "devices/pci/root_port.h"

namespace mvmm::devices::pci {

inline constexpr uint8_t devfn(uint8_t device, uint8_t function) {
    return static_cast<uint8_t>(device << 3 | function);
}

// Whether an access of `kind` to [base, base + size) reaches a bus from the host.
using Forwards = std::function<bool(BarKind kind, uint64_t base, uint64_t size)>;

class PciBus {
  public:
    // `name` prefixes the names of the BAR regions (logs only).
    PciBus(MmioSpace& mmio, PioSpace& pio, std::string name);
    ~PciBus();  // unmaps every BAR on this bus
    PciBus(const PciBus&) = delete;
    PciBus& operator=(const PciBus&) = delete;

    // Puts `function` at `devfn`; its BARs are registered unmapped.  Throws when occupied.
    void attach(uint8_t devfn, std::shared_ptr<PciFunction> function);
    // Puts a root port at `devfn` and returns the (empty) bus behind it.
    PciBus& attach_port(uint8_t devfn, std::shared_ptr<RootPort> port);
    // Takes the function at `devfn` off the bus and returns it (nullptr when there is none;
    // not a root port): its BARs leave the address spaces (it hears bar_mapped(nullopt) for
    // each mapped one), and once this returns no access is inside its BAR handlers or will
    // reach them, so the caller may destroy it.
    std::shared_ptr<PciFunction> detach(uint8_t devfn);
    bool occupied(uint8_t devfn) const { return nodes_[devfn] != nullptr; }
    bool holds_port(uint8_t devfn) const { return occupied(devfn) && nodes_[devfn]->port; }

    // The bus that a config cycle for bus `number` reaches when this bus is `own_number`:
    // through root ports whose secondary..subordinate range holds it.  nullptr if none.
    PciBus* route(uint8_t number, uint8_t own_number);
    // A config access to the function at `devfn`; false when there is none.
    bool config_read(uint8_t devfn, uint16_t offset, std::span<uint8_t> data);
    bool config_write(uint8_t devfn, uint16_t offset, std::span<const uint8_t> data);

    // Maps, moves or unmaps every BAR on this bus and below so that each one decodes exactly
    // when its function enables decoding, its address is assigned (non-zero), and every
    // bridge on the way (`upstream`, then root ports) forwards its whole range.
    void sync_mappings(const Forwards& upstream);

  private:
    class BarGate;
    struct MappedBar {
        Bar bar;
        std::shared_ptr<BarGate> gate;  // what the address space calls: the BAR's handler
        RegionId region;
        std::optional<uint64_t> base;  // where it is mapped now
    };
    struct Node {
        std::shared_ptr<PciFunction> function;
        std::vector<MappedBar> bars;
        std::shared_ptr<RootPort> port;     // set when the function is a root port
        std::unique_ptr<PciBus> secondary;  // the bus behind `port`
    };

    Node& add_node(uint8_t devfn, std::shared_ptr<PciFunction> function);
    std::optional<uint64_t> decoded_base(PciFunction& function, const Bar& bar, uint16_t command,
                                         const Forwards& upstream) const;
    void map(MappedBar& mapped, std::optional<uint64_t> base);
    void unregister(const MappedBar& mapped);
    bool slot_is_multifunction(uint8_t devfn) const;

    MmioSpace& mmio_;
    PioSpace& pio_;
    std::string name_;
    std::array<std::unique_ptr<Node>, 256> nodes_;
};

}  // namespace mvmm::devices::pci
