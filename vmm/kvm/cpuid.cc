#include "vmm/kvm/cpuid.h"

#include <bit>
#include <cstdint>

namespace mvmm {

namespace {

constexpr uint32_t kLeaf1EcxHypervisor = 1u << 31;
constexpr uint32_t kLeaf1EdxHtt = 1u << 28;
constexpr uint32_t kTopologyTypeSmt = 1;
constexpr uint32_t kTopologyTypeCore = 2;

}  // namespace

std::vector<kvm_cpuid_entry2> cpuid_for_vcpu(std::span<const kvm_cpuid_entry2> supported,
                                             unsigned index, unsigned count) {
    // Bits of the APIC ID that number the cores.
    const uint32_t core_bits = count > 1 ? std::bit_width(count - 1) : 0;
    std::vector<kvm_cpuid_entry2> out(supported.begin(), supported.end());
    for (auto& e : out) {
        switch (e.function) {
            case 0x1:
                e.ebx = (e.ebx & 0x0000ffff) | (index << 24) | (count << 16);
                e.ecx |= kLeaf1EcxHypervisor;
                if (count > 1) e.edx |= kLeaf1EdxHtt;
                break;
            case 0x4:
                // Cores per package - 1 in EAX[31:26]; caches shared by one core except the
                // last level, which the whole socket shares.
                if ((e.eax & 0x1f) != 0) {
                    uint32_t level = (e.eax >> 5) & 0x7;
                    uint32_t sharing = level >= 3 ? count - 1 : 0;
                    e.eax = (e.eax & 0x3fff) | (sharing << 14) | ((count - 1) << 26);
                }
                break;
            case 0xb:
            case 0x1f:
                e.edx = index;
                if (e.index == 0) {
                    e.eax = 0;
                    e.ebx = 1;
                    e.ecx = (kTopologyTypeSmt << 8) | e.index;
                } else if (e.index == 1) {
                    e.eax = core_bits;
                    e.ebx = count;
                    e.ecx = (kTopologyTypeCore << 8) | e.index;
                } else {
                    e.eax = e.ebx = 0;
                    e.ecx = e.index;
                }
                break;
            case 0x80000008:
                // AMD: number of cores - 1 and the APIC ID size.
                e.ecx = (e.ecx & ~0xf0ffu) | (count - 1) | (core_bits << 12);
                break;
            default:
                break;
        }
    }
    return out;
}

}  // namespace mvmm
