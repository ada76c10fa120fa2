// A machine without vCPUs for PCI device tests: the MMIO and PIO address spaces a vCPU exit
// dispatches into, a fake platform, and a host bridge; the test plays the guest through the
// same ECAM and 0xCF8/0xCFC accesses a vCPU would make.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "devices/pci/fake_platform.h"
#include "devices/pci/host_bridge.h"

namespace mvmm::devices::testing {

inline pci::PciLayout test_layout() {
    return {.ecam_base = GuestAddr(0xe000'0000),
            .ecam_buses = 256,
            .mmio32 = {0xc000'0000, 0x2000'0000},
            .mmio64 = {0x40'0000'0000, 64ull << 30},
            .io = {0x1000, 0xf000}};
}

struct PciAddr {
    uint8_t bus = 0;
    uint8_t device = 0;
    uint8_t function = 0;
};

class PciHarness {
  public:
    MmioSpace mmio;
    PioSpace pio;
    FakePlatform platform;
    pci::PciHostBridge bridge{test_layout(), mmio, pio, platform};

    // Config access through ECAM, as Linux's MMCONFIG accessors do.
    template <class T>
    T ecam_read(PciAddr a, uint16_t offset) {
        T v;
        if (!mmio.read(ecam(a, offset), bytes(v))) std::memset(&v, 0xee, sizeof v);
        return v;
    }
    template <class T>
    void ecam_write(PciAddr a, uint16_t offset, T v) {
        mmio.write(ecam(a, offset), bytes(v));
    }

    // Config access through CONFIG_ADDRESS/CONFIG_DATA (offset < 256).
    template <class T>
    T legacy_read(PciAddr a, uint16_t offset) {
        select(a, offset);
        T v;
        pio.read(PioPort(0xcfc + (offset & 3)), bytes(v));
        return v;
    }
    template <class T>
    void legacy_write(PciAddr a, uint16_t offset, T v) {
        select(a, offset);
        pio.write(PioPort(0xcfc + (offset & 3)), bytes(v));
    }

    // MMIO as a vCPU exit issues it; reads of unmapped addresses return `missing`.
    template <class T>
    T mmio_read(uint64_t addr, T missing = T(~T{0})) {
        T v;
        return mmio.read(GuestAddr(addr), bytes(v)) ? v : missing;
    }
    template <class T>
    bool mmio_write(uint64_t addr, T v) {
        return mmio.write(GuestAddr(addr), bytes(v));
    }

  private:
    template <class T>
    static std::span<uint8_t> bytes(T& v) {
        return {reinterpret_cast<uint8_t*>(&v), sizeof v};
    }
    static GuestAddr ecam(PciAddr a, uint16_t offset) {
        return GuestAddr(0xe000'0000 + (uint64_t{a.bus} << 20) + (uint64_t{a.device} << 15) +
                         (uint64_t{a.function} << 12) + offset);
    }
    void select(PciAddr a, uint16_t offset) {
        uint32_t address = 1u << 31 | uint32_t{a.bus} << 16 | uint32_t{a.device} << 11 |
                           uint32_t{a.function} << 8 | (offset & 0xfc);
        pio.write(PioPort(0xcf8), bytes(address));
    }
};

}  // namespace mvmm::devices::testing
