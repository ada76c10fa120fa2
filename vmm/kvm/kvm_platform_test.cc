// KvmPlatform on this machine's /dev/kvm (a VM with an in-kernel irqchip needs no guest code,
// so this runs on PVM too): how many KVM_SET_GSI_ROUTING pushes route changes cost.
#include "vmm/kvm/kvm_platform.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <vector>

namespace mvmm {
namespace {

class KvmPlatformTest : public ::testing::Test {
  protected:
    void SetUp() override {
        try {
            kvm_.emplace();
        } catch (const std::exception& e) {
            GTEST_SKIP() << "no usable /dev/kvm: " << e.what();
        }
        vm_.emplace(*kvm_);
        platform_.emplace(*vm_);
    }
    devices::MsiMessage message(uint32_t data) { return {0xfee0'0000, data}; }

    std::optional<Kvm> kvm_;
    std::optional<Vm> vm_;
    std::optional<KvmPlatform> platform_;
};

TEST_F(KvmPlatformTest, RouteChangesReachKvmInOnePushBeforeTheNextTrigger) {
    EXPECT_EQ(platform_->routing_pushes(), 1u);  // the legacy lines
    std::vector<std::unique_ptr<devices::MsiVector>> vectors;
    for (uint32_t i = 0; i < 64; ++i) {
        vectors.push_back(platform_->allocate_msi_vector());
        vectors.back()->route(message(0x40 + i));
    }
    EXPECT_EQ(platform_->routing_pushes(), 1u);
    vectors[7]->trigger();
    EXPECT_EQ(platform_->routing_pushes(), 2u);  // all 64 routes at once
    vectors[7]->trigger();
    vectors[8]->trigger();
    EXPECT_EQ(platform_->routing_pushes(), 2u);

    vectors[8]->route(message(0x48));  // unchanged
    vectors[9]->trigger();
    EXPECT_EQ(platform_->routing_pushes(), 2u);
    vectors[8]->route(message(0x90));
    vectors[9]->trigger();  // another vector's trigger pushes the change too
    EXPECT_EQ(platform_->routing_pushes(), 3u);

    vectors.pop_back();  // released: no push of its own
    EXPECT_EQ(platform_->routing_pushes(), 3u);
    vectors.push_back(platform_->allocate_msi_vector());  // reuses the GSI
    vectors.back()->route(message(0x77));
    vectors.back()->trigger();
    EXPECT_EQ(platform_->routing_pushes(), 4u);
}

}  // namespace
}  // namespace mvmm
