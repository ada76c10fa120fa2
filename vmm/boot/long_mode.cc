#include "vmm/boot/long_mode.h"

#include <array>
#include <cstdint>

#include "vmm/boot/bzimage.h"
#include "vmm/layout.h"

namespace mvmm::boot {

namespace {

constexpr uint64_t kCr0Pe = 1ull << 0;
constexpr uint64_t kCr0Et = 1ull << 4;
constexpr uint64_t kCr0Pg = 1ull << 31;
constexpr uint64_t kCr4Pae = 1ull << 5;
constexpr uint64_t kEferLme = 1ull << 8;
constexpr uint64_t kEferLma = 1ull << 10;

constexpr uint64_t kPtePresent = 1ull << 0;
constexpr uint64_t kPteWritable = 1ull << 1;
constexpr uint64_t kPteHuge = 1ull << 7;

// GDT entries: null, null, 64-bit code (0x10), data (0x18), TSS (0x20).
constexpr std::array<uint64_t, 5> kGdt = {
    0,
    0,
    0x00af9b000000ffff,  // code: present, DPL 0, execute/read, L=1, G=1
    0x00cf93000000ffff,  // data: present, DPL 0, read/write, D/B=1, G=1
    0x00808b0000000000,  // TSS: present, busy 64-bit TSS
};

kvm_segment segment_from_gdt(uint16_t selector) {
    uint64_t d = kGdt[selector >> 3];
    kvm_segment s{};
    s.selector = selector;
    s.base = ((d >> 16) & 0xffffff) | (((d >> 56) & 0xff) << 24);
    uint32_t limit = static_cast<uint32_t>((d & 0xffff) | (((d >> 48) & 0xf) << 16));
    s.g = (d >> 55) & 1;
    s.limit = s.g ? (limit << 12) | 0xfff : limit;
    s.type = (d >> 40) & 0xf;
    s.s = (d >> 44) & 1;
    s.dpl = (d >> 45) & 3;
    s.present = (d >> 47) & 1;
    s.avl = (d >> 52) & 1;
    s.l = (d >> 53) & 1;
    s.db = (d >> 54) & 1;
    return s;
}

void write_checked(const GuestMemory& memory, GuestAddr addr, uint64_t value) {
    if (!memory.write(addr, value)) throw BootError("guest RAM too small for the boot page tables");
}

}  // namespace

void write_long_mode_tables(const GuestMemory& memory) {
    for (size_t i = 0; i < kGdt.size(); ++i) write_checked(memory, layout::kGdt + i * 8, kGdt[i]);
    write_checked(memory, layout::kPml4, layout::kPdpt.value() | kPtePresent | kPteWritable);
    for (uint64_t gib = 0; gib < 4; ++gib) {
        GuestAddr dir = layout::kPageDirs + gib * 4096;
        write_checked(memory, layout::kPdpt + gib * 8, dir.value() | kPtePresent | kPteWritable);
        for (uint64_t i = 0; i < 512; ++i) {
            uint64_t phys = (gib << 30) | (i << 21);
            write_checked(memory, dir + i * 8, phys | kPtePresent | kPteWritable | kPteHuge);
        }
    }
}

void set_long_mode_sregs(kvm_sregs& sregs) {
    sregs.cs = segment_from_gdt(0x10);
    sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = segment_from_gdt(0x18);
    sregs.tr = segment_from_gdt(0x20);
    sregs.tr.limit = 0x67;
    sregs.ldt = {};
    sregs.ldt.unusable = 1;
    sregs.gdt.base = layout::kGdt.value();
    sregs.gdt.limit = static_cast<uint16_t>(kGdt.size() * 8 - 1);
    sregs.idt.base = 0;
    sregs.idt.limit = 0;
    sregs.cr0 = kCr0Pe | kCr0Et | kCr0Pg;
    sregs.cr3 = layout::kPml4.value();
    sregs.cr4 = kCr4Pae;
    sregs.efer = kEferLme | kEferLma;
}

kvm_regs long_mode_entry_regs(GuestAddr entry, GuestAddr zero_page) {
    kvm_regs regs{};
    regs.rip = entry.value();
    regs.rsi = zero_page.value();
    regs.rflags = 0x2;  // bit 1 is reserved and always set
    return regs;
}

kvm_fpu initial_fpu() {
    kvm_fpu fpu{};
    fpu.fcw = 0x37f;
    fpu.mxcsr = 0x1f80;
    return fpu;
}

}  // namespace mvmm::boot
