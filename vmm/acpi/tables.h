// ACPI tables for an mvmm machine: RSDP -> XSDT -> FADT (-> DSDT), MADT, MCFG.
#pragma once

#include <cstdint>
#include <vector>

#include "mem/guest_addr.h"

namespace mvmm::acpi {

// Fixed hardware the tables describe.
inline constexpr uint16_t kPm1EventPort = 0x600;    // PM1a status/enable, 4 bytes
inline constexpr uint16_t kPm1ControlPort = 0x604;  // PM1a control, 2 bytes
inline constexpr uint16_t kResetPort = 0xcf9;
inline constexpr uint8_t kResetValue = 0x06;
inline constexpr uint8_t kSciIrq = 9;
inline constexpr uint8_t kS5SleepType = 5;  // SLP_TYP the guest writes to power off
inline constexpr uint16_t kCom1Port = 0x3f8;
inline constexpr uint8_t kCom1Irq = 4;

struct PciHostInfo {
    GuestAddr ecam_base;
    uint8_t last_bus;
    uint16_t io_first, io_last;
    GuestAddr mmio32_first, mmio32_last;
    GuestAddr mmio64_first, mmio64_last;
};

struct MachineInfo {
    unsigned cpus;
    GuestAddr ioapic;
    GuestAddr lapic;
    PciHostInfo pci;
};

struct Tables {
    GuestAddr rsdp;              // where the guest finds them
    std::vector<uint8_t> bytes;  // to be copied to `base`
    GuestAddr base;
};

// Lays out all tables starting at `base` (RSDP first, 16-byte aligned tables).
Tables build_tables(const MachineInfo& machine, GuestAddr base);

// Byte that makes the sum of `bytes` zero.
uint8_t checksum_fix(const uint8_t* bytes, size_t len);

}  // namespace mvmm::acpi
