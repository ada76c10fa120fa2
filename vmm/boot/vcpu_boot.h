// A vCPU's state at power-on for a direct Linux boot: CPUID with mvmm's topology, the MSRs and
// local APIC lines firmware would leave, and for the boot CPU the 64-bit entry of the boot
// protocol.  Application processors wait for INIT/SIPI from the boot CPU.
#pragma once

#include "vmm/boot/bzimage.h"
#include "vmm/kvm/kvm.h"

namespace mvmm::boot {

void set_power_on_state(const Vcpu& vcpu, const Kvm& kvm, unsigned vcpu_count,
                        const BootInfo& boot);

}  // namespace mvmm::boot
