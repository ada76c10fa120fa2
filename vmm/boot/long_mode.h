// The CPU state the 64-bit boot protocol asks for: long mode, identity-mapped page tables,
// a flat GDT with __BOOT_CS = 0x10 and __BOOT_DS = 0x18, interrupts off.
#pragma once

#include <linux/kvm.h>

#include "mem/guest_memory.h"

namespace mvmm::boot {

// Writes the GDT and page tables identity-mapping the low 4 GiB with 2 MiB pages.
void write_long_mode_tables(const GuestMemory& memory);

// Sets segment, control and descriptor-table registers for 64-bit entry.
void set_long_mode_sregs(kvm_sregs& sregs);

// General registers for entry at `entry` with RSI pointing at the zero page.
kvm_regs long_mode_entry_regs(GuestAddr entry, GuestAddr zero_page);

// x87/SSE state as after a reset with the usual control words.
kvm_fpu initial_fpu();

}  // namespace mvmm::boot
