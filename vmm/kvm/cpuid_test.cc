#include "vmm/kvm/cpuid.h"

#include <gtest/gtest.h>

namespace mvmm {
namespace {

kvm_cpuid_entry2 entry(uint32_t function, uint32_t index = 0) {
    kvm_cpuid_entry2 e{};
    e.function = function;
    e.index = index;
    return e;
}

const kvm_cpuid_entry2& find(const std::vector<kvm_cpuid_entry2>& v, uint32_t f, uint32_t i = 0) {
    for (auto& e : v)
        if (e.function == f && e.index == i) return e;
    throw std::runtime_error("leaf missing");
}

TEST(Cpuid, Leaf1CarriesApicIdCountAndHypervisorBit) {
    auto l1 = entry(1);
    l1.ebx = 0xff00ffff;  // host APIC ID and count to be replaced, low bits kept
    std::vector<kvm_cpuid_entry2> supported = {l1};
    auto out = cpuid_for_vcpu(supported, 3, 4);
    const auto& e = find(out, 1);
    EXPECT_EQ(e.ebx >> 24, 3u);
    EXPECT_EQ((e.ebx >> 16) & 0xff, 4u);
    EXPECT_EQ(e.ebx & 0xffff, 0xffffu);
    EXPECT_TRUE(e.ecx & (1u << 31));
    EXPECT_TRUE(e.edx & (1u << 28));
}

TEST(Cpuid, ExtendedTopologyDescribesCoresInOneSocket) {
    std::vector<kvm_cpuid_entry2> supported = {entry(0xb, 0), entry(0xb, 1), entry(0xb, 2)};
    auto out = cpuid_for_vcpu(supported, 5, 6);
    EXPECT_EQ(find(out, 0xb, 0).ebx, 1u);
    EXPECT_EQ(find(out, 0xb, 1).ebx, 6u);
    EXPECT_EQ(find(out, 0xb, 1).eax, 3u);  // 6 cores need 3 bits
    EXPECT_EQ((find(out, 0xb, 1).ecx >> 8) & 0xff, 2u);
    EXPECT_EQ(find(out, 0xb, 2).ebx, 0u);
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(find(out, 0xb, i).edx, 5u);
}

TEST(Cpuid, SingleCpuHasNoHttAndLeavesOtherLeavesAlone) {
    auto l1 = entry(1);
    auto other = entry(7);
    other.ebx = 0x1234;
    std::vector<kvm_cpuid_entry2> supported = {l1, other};
    auto out = cpuid_for_vcpu(supported, 0, 1);
    EXPECT_FALSE(find(out, 1).edx & (1u << 28));
    EXPECT_EQ(find(out, 7).ebx, 0x1234u);
}

TEST(Cpuid, AmdCoreCount) {
    std::vector<kvm_cpuid_entry2> supported = {entry(0x80000008)};
    auto out = cpuid_for_vcpu(supported, 0, 2);
    EXPECT_EQ(find(out, 0x80000008).ecx & 0xff, 1u);
}

}  // namespace
}  // namespace mvmm
