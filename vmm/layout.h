// The guest-physical memory map of an mvmm machine.
//
//   0x0000_0500  GDT                         0x0000_9000  page tables (PML4, PDPT, 4 PDs)
//   0x0000_7000  zero page (boot_params)     0x0002_0000  kernel command line
//   0x000e_0000  ACPI tables (reserved)      0x0010_0000  kernel, then initrd at the top of low RAM
//   low RAM ends at 3 GiB at most; 0xC000_0000-0xDFFF_FFFF PCI 32-bit MMIO window,
//   0xE000_0000-0xEFFF_FFFF PCIe ECAM, 0xFEC0_0000 IOAPIC, 0xFEE0_0000 LAPIC;
//   RAM above 3 GiB continues at 4 GiB; the 64-bit PCI window sits above all RAM.
#pragma once

#include <cstdint>
#include <vector>

#include "mem/guest_addr.h"
#include "mem/guest_ram.h"

namespace mvmm::layout {

inline constexpr GuestAddr kGdt{0x500};
inline constexpr GuestAddr kZeroPage{0x7000};
inline constexpr GuestAddr kPml4{0x9000};
inline constexpr GuestAddr kPdpt{0xa000};
inline constexpr GuestAddr kPageDirs{0xb000};  // 4 pages: identity map of the low 4 GiB
inline constexpr GuestAddr kCmdline{0x20000};
inline constexpr uint64_t kCmdlineMax = 0x10000;
inline constexpr GuestAddr kEbdaStart{0x9fc00};
inline constexpr GuestAddr kAcpiStart{0xe0000};
inline constexpr GuestAddr kHighMemStart{0x100000};  // where the protected-mode kernel goes
inline constexpr GuestAddr kLowRamMaxEnd{0xC000'0000};
inline constexpr GuestAddr kPciMmio32Start{0xC000'0000};
inline constexpr uint64_t kPciMmio32Size = 0x2000'0000;
inline constexpr GuestAddr kEcamStart{0xE000'0000};
inline constexpr uint64_t kEcamSize = 0x1000'0000;  // 256 buses x 1 MiB
inline constexpr GuestAddr kIoapic{0xFEC0'0000};
inline constexpr GuestAddr kLapic{0xFEE0'0000};
inline constexpr GuestAddr k4GiB{0x1'0000'0000};
inline constexpr uint64_t kPciMmio64Size = 64ull << 30;
inline constexpr uint64_t kPciIoStart = 0x1000;  // ports below are legacy devices
inline constexpr uint64_t kPciIoSize = 0xf000;

// Guest RAM of `size` bytes split around the 32-bit PCI hole.
std::vector<RamRange> ram_ranges(uint64_t size);

// The 64-bit PCI window: the first 1 GiB-aligned address above RAM.
GuestAddr pci_mmio64_start(uint64_t ram_size);

}  // namespace mvmm::layout
