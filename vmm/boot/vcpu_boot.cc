#include "vmm/boot/vcpu_boot.h"

#include <cstring>

#include "vmm/boot/long_mode.h"
#include "vmm/kvm/cpuid.h"

namespace mvmm::boot {

namespace {

constexpr uint32_t kMsrMiscEnable = 0x1a0;
constexpr uint64_t kMiscEnableFastStrings = 1;

// Local APIC registers (offsets into the APIC page) and LVT fields.
constexpr size_t kLvtLint0 = 0x350;
constexpr size_t kLvtLint1 = 0x360;
constexpr uint32_t kLvtDeliveryModeMask = 0x700;
constexpr unsigned kLvtDeliveryModeShift = 8;
constexpr uint32_t kLvtMasked = 1u << 16;
constexpr uint32_t kDeliveryExtInt = 7;
constexpr uint32_t kDeliveryNmi = 4;

void set_lvt(kvm_lapic_state& lapic, size_t offset, uint32_t delivery_mode) {
    uint32_t lvt;
    std::memcpy(&lvt, lapic.regs + offset, sizeof lvt);
    lvt = (lvt & ~kLvtDeliveryModeMask & ~kLvtMasked) | (delivery_mode << kLvtDeliveryModeShift);
    std::memcpy(lapic.regs + offset, &lvt, sizeof lvt);
}

}  // namespace

void set_power_on_state(const Vcpu& vcpu, const Kvm& kvm, unsigned vcpu_count,
                        const BootInfo& boot) {
    vcpu.set_cpuid(cpuid_for_vcpu(kvm.supported_cpuid(), vcpu.index(), vcpu_count));
    const kvm_msr_entry msrs[] = {{kMsrMiscEnable, 0, kMiscEnableFastStrings}};
    vcpu.set_msrs(msrs);
    // LINT0 delivers the PIC's ExtINT, LINT1 NMIs, as firmware leaves them.
    auto lapic = vcpu.get_lapic();
    set_lvt(lapic, kLvtLint0, kDeliveryExtInt);
    set_lvt(lapic, kLvtLint1, kDeliveryNmi);
    vcpu.set_lapic(lapic);
    vcpu.set_fpu(initial_fpu());
    if (vcpu.index() != 0) return;
    auto sregs = vcpu.get_sregs();
    set_long_mode_sregs(sregs);
    vcpu.set_sregs(sregs);
    vcpu.set_regs(long_mode_entry_regs(boot.entry, boot.zero_page));
}

}  // namespace mvmm::boot
