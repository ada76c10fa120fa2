// CPUID for a vCPU: what KVM supports, with the topology of an mvmm machine
// (`count` single-threaded cores in one socket) and the hypervisor bit.
#pragma once

#include <linux/kvm.h>

#include <span>
#include <vector>

namespace mvmm {

std::vector<kvm_cpuid_entry2> cpuid_for_vcpu(std::span<const kvm_cpuid_entry2> supported,
                                             unsigned index, unsigned count);

}  // namespace mvmm
