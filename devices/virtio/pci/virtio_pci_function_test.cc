#include "devices/virtio/pci/virtio_pci_function.h"

#include <gtest/gtest.h>

#include <cstddef>

#include "devices/pci/test_harness.h"
#include "devices/virtio/pci/test_pci_driver.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::pci {
namespace {

using devices::testing::PciAddr;
namespace reg = devices::pci::reg;
namespace command = devices::pci::command;

constexpr uint64_t kDeviceFeature = 1ull << 5;  // a device-specific bit

// What the transport did to the device, observable after the device moved into it.
struct DeviceLog {
    std::optional<ActivateContext> activated;
    unsigned resets = 0;
    bool activate_result = true;
    bool needs_reset = false;
};

class FakeDevice : public Device {
  public:
    explicit FakeDevice(DeviceLog& log) : log_(log) {}
    uint32_t device_id() const override { return 2; }
    uint64_t features() const override {
        return kFeatureVersion1 | kFeatureEventIdx | kDeviceFeature;
    }
    uint16_t num_queues() const override { return 2; }
    uint16_t max_queue_size() const override { return 128; }
    void read_config(uint64_t offset, std::span<uint8_t> data) const override {
        for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(0xa0 + offset + i);
    }
    void write_config(uint64_t, std::span<const uint8_t>) override {}
    bool activate(ActivateContext context) override {
        log_.activated.emplace(std::move(context));
        return log_.activate_result;
    }
    void reset() override {
        ++log_.resets;
        log_.activated.reset();
    }
    bool needs_reset() const override { return log_.needs_reset; }

  private:
    DeviceLog& log_;
};

constexpr uint64_t kBar = 0xc000'0000;
constexpr uint16_t kNoVectorValue = 0xffff;
constexpr uint8_t kDriverOkStatus = testing::PciDriver::kDriverOkStatus;

QueueConfig queue(uint16_t size, uint64_t desc, uint64_t avail, uint64_t used) {
    return {size, GuestAddr(desc), GuestAddr(avail), GuestAddr(used), false};
}

class VirtioPciTest : public ::testing::Test {
  protected:
    PciAddr attach() {
        function = std::make_shared<VirtioPciFunction>(std::make_unique<FakeDevice>(log),
                                                       h.platform, guest.memory());
        return {0, h.bridge.attach(function, devices::pci::RootBusSlot{}).device, 0};
    }
    const devices::testing::FakePlatform::Vector& msi(unsigned v) {
        return *h.platform.vectors.at(v);
    }

    // The logs outlive the harness: destroying a function resets its device.
    DeviceLog log;
    DeviceLog other_log;
    devices::testing::PciHarness h;
    virtio::testing::TestGuest guest;
    std::shared_ptr<VirtioPciFunction> function;
    PciAddr dev = attach();
    testing::PciDriver driver{h, dev};
    uint64_t bar_size = driver.assign_bar(kBar);
};

TEST_F(VirtioPciTest, IdentifiesAsAModernVirtioDevice) {
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, reg::kVendorId), 0x1042'1af4u);  // 0x1040 + block
    EXPECT_EQ(h.ecam_read<uint8_t>(dev, reg::kRevision), 1);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, reg::kSubsystemVendorId), 0x1100'1af4u);
    EXPECT_EQ(h.ecam_read<uint8_t>(dev, reg::kInterruptPin), 0);    // MSI-X only
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, reg::kBar0) & 0xf, 0x4u);  // 64-bit memory
    EXPECT_EQ(bar_size, 0x8000u);
}

TEST_F(VirtioPciTest, CapabilitiesDescribeTheBarLayout) {
    const auto caps = driver.capabilities();
    struct Expected {
        uint8_t cfg_type;
        uint32_t offset;
        uint32_t length;
    };
    for (const Expected& e : {Expected{1, 0x0000, 0x38}, Expected{2, 0x3000, 8},
                              Expected{3, 0x1000, 1}, Expected{4, 0x2000, 0x1000}}) {
        const uint8_t at = caps.at({0x09, e.cfg_type});
        EXPECT_EQ(h.ecam_read<uint8_t>(dev, at + 4), 0) << "BAR of cfg_type " << int(e.cfg_type);
        EXPECT_EQ(h.ecam_read<uint32_t>(dev, at + 8), e.offset);
        EXPECT_EQ(h.ecam_read<uint32_t>(dev, at + 12), e.length);
    }
    EXPECT_EQ(h.ecam_read<uint8_t>(dev, caps.at({0x09, 2}) + 2), 20);    // cap_len
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, caps.at({0x09, 2}) + 16), 4u);  // multiplier
    EXPECT_TRUE(caps.contains({0x09, 5}));                               // PCI cfg access
    const uint8_t msix = caps.at({0x11, 0});
    EXPECT_EQ(h.ecam_read<uint16_t>(dev, msix + 2) & 0x7ff, 2);  // config + 2 queues
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, msix + 4), 0x4000u);    // table in BAR 0
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, msix + 8), 0x5000u);    // PBA in BAR 0
}

TEST_F(VirtioPciTest, DriverInitializationActivatesTheDeviceWithItsQueues) {
    driver.enable_msix(3);
    driver.negotiate(kFeatureVersion1 | kFeatureEventIdx);
    EXPECT_EQ(log.resets, 1u);
    EXPECT_EQ(driver.device_features(), kFeatureVersion1 | kFeatureEventIdx | kDeviceFeature);
    EXPECT_EQ(driver.status() & status::kFeaturesOk, status::kFeaturesOk);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, num_queues)), 2);

    driver.set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, config_msix_vector)), 0);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_select), 1);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_size)), 128);  // the maximum
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_notify_off)), 1);
    driver.setup_queue(0, queue(64, 0x1'0000'1000, 0x2000, 0x3000), 1);
    driver.setup_queue(1, queue(32, 0x4000, 0x5000, 0x6000), 2);
    EXPECT_EQ(driver.common<uint64_t>(offsetof(CommonConfig, queue_driver)), 0x5000u);
    EXPECT_FALSE(log.activated);

    driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    const ActivateContext& context = *log.activated;
    EXPECT_EQ(context.features, kFeatureVersion1 | kFeatureEventIdx);
    ASSERT_EQ(context.queues.size(), 2u);
    EXPECT_EQ(context.queues[0].size, 64);
    EXPECT_EQ(context.queues[0].desc, GuestAddr(0x1'0000'1000));
    EXPECT_EQ(context.queues[0].avail, GuestAddr(0x2000));
    EXPECT_EQ(context.queues[0].used, GuestAddr(0x3000));
    EXPECT_TRUE(context.queues[0].ready);
    EXPECT_EQ(context.queues[1].size, 32);
    EXPECT_EQ(&context.memory, &guest.memory());
    ASSERT_EQ(context.kicks.size(), 2u);
    EXPECT_EQ(driver.status(), kDriverOkStatus);

    // Kicks: a notify write (no ioeventfd in tests) signals the queue's EventFd.
    EXPECT_TRUE(h.mmio_write<uint16_t>(kBar + 0x3004, 1));
    EXPECT_EQ(context.kicks[1]->consume(), 1u);
    EXPECT_EQ(context.kicks[0]->consume(), 0u);

    // Interrupts: each queue's MSI-X vector, and the config vector.
    context.interrupt.notify_queue(1);
    EXPECT_EQ(msi(2).triggers, 1u);
    EXPECT_EQ(*msi(2).message, (MsiMessage{0xfee0'0000, 0x42}));
    const auto generation = driver.common<uint8_t>(offsetof(CommonConfig, config_generation));
    context.interrupt.notify_config();
    EXPECT_EQ(msi(0).triggers, 1u);
    EXPECT_EQ(driver.common<uint8_t>(offsetof(CommonConfig, config_generation)),
              uint8_t(generation + 1));
}

TEST_F(VirtioPciTest, ResetReturnsEverythingToItsInitialState) {
    driver.enable_msix(3);
    driver.negotiate(kFeatureVersion1);
    driver.setup_queue(0, queue(64, 0x1000, 0x2000, 0x3000), 1);
    driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    h.mmio_write<uint16_t>(kBar + 0x3000, 0);  // a kick nobody consumed

    driver.set_status(0);
    EXPECT_EQ(log.resets, 2u);
    EXPECT_FALSE(log.activated);
    EXPECT_EQ(driver.status(), 0);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_select), 0);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_size)), 128);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_enable)), 0);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_msix_vector)), kNoVectorValue);
    EXPECT_EQ(driver.common<uint64_t>(offsetof(CommonConfig, queue_desc)), 0u);

    driver.negotiate(kFeatureVersion1);
    driver.setup_queue(0, queue(64, 0x1000, 0x2000, 0x3000), 1);
    driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    EXPECT_EQ(log.activated->kicks[0]->consume(), 0u);  // the stale kick is gone
}

TEST_F(VirtioPciTest, FeaturesOkNeedsVersion1AndOfferedFeaturesOnly) {
    driver.negotiate(kFeatureEventIdx);  // no VERSION_1
    EXPECT_EQ(driver.status() & status::kFeaturesOk, 0);
    driver.negotiate(kFeatureVersion1 | kFeatureIndirectDesc);  // not offered
    EXPECT_EQ(driver.status() & status::kFeaturesOk, 0);
    driver.negotiate(kFeatureVersion1);
    EXPECT_EQ(driver.status() & status::kFeaturesOk, status::kFeaturesOk);
    driver.set_driver_features(kFeatureVersion1 | kDeviceFeature);  // too late: ignored
    driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    EXPECT_EQ(log.activated->features, kFeatureVersion1);
}

TEST_F(VirtioPciTest, FailedActivationSetsNeedsResetAndInterrupts) {
    driver.enable_msix(3);
    log.activate_result = false;
    driver.negotiate(kFeatureVersion1);
    driver.set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
    driver.set_status(kDriverOkStatus);
    EXPECT_EQ(driver.status(), kDriverOkStatus | status::kNeedsReset);
    EXPECT_EQ(msi(0).triggers, 1u);
    driver.set_status(0);
    EXPECT_EQ(driver.status(), 0);
}

TEST_F(VirtioPciTest, DriverOkWithoutFeaturesOkNeedsReset) {
    driver.set_status(status::kAcknowledge | status::kDriver);
    driver.set_status(status::kAcknowledge | status::kDriver | status::kDriverOk);
    EXPECT_FALSE(log.activated);
    EXPECT_NE(driver.status() & status::kNeedsReset, 0);
}

TEST_F(VirtioPciTest, DeviceReportedCorruptionShowsInTheStatus) {
    driver.negotiate(kFeatureVersion1);
    driver.set_status(kDriverOkStatus);
    log.needs_reset = true;
    EXPECT_EQ(driver.status(), kDriverOkStatus | status::kNeedsReset);
    driver.set_status(0);
    EXPECT_EQ(driver.status(), 0);  // even if the device still says so: Linux waits for 0
}

TEST_F(VirtioPciTest, VectorsTheTableLacksReadBackAsNoVector) {
    driver.set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 3);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, config_msix_vector)), kNoVectorValue);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_select), 0);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_msix_vector), 2);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_msix_vector)), 2);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_msix_vector), 7);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_msix_vector)), kNoVectorValue);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_select), 2);  // no such queue
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_size)), 0);
    driver.set_common<uint16_t>(offsetof(CommonConfig, queue_size), 16);
    EXPECT_EQ(driver.common<uint16_t>(offsetof(CommonConfig, queue_size)), 0);
}

TEST_F(VirtioPciTest, IsrReportsInterruptsWithoutMsixAndClearsOnRead) {
    driver.negotiate(kFeatureVersion1);
    driver.setup_queue(0, queue(64, 0x1000, 0x2000, 0x3000), kNoVectorValue);
    driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    log.activated->interrupt.notify_queue(0);
    log.activated->interrupt.notify_config();
    EXPECT_EQ(h.mmio_read<uint8_t>(kBar + 0x1000), 3);
    EXPECT_EQ(h.mmio_read<uint8_t>(kBar + 0x1000), 0);
    for (unsigned v = 0; v < 3; ++v) EXPECT_EQ(msi(v).triggers, 0u);
}

TEST_F(VirtioPciTest, DeviceConfigIsTheDevices) {
    EXPECT_EQ(h.mmio_read<uint32_t>(kBar + 0x2004), 0xa7a6'a5a4u);
}

TEST_F(VirtioPciTest, PciConfigAccessCapabilityReachesTheBar) {
    const uint8_t cap = driver.capabilities().at({0x09, 5});
    h.ecam_write<uint8_t>(dev, cap + 4, 0);
    h.ecam_write<uint32_t>(dev, cap + 8, offsetof(CommonConfig, device_status));
    h.ecam_write<uint32_t>(dev, cap + 12, 1);
    h.ecam_write<uint32_t>(dev, cap + 16, status::kAcknowledge);
    EXPECT_EQ(driver.status(), status::kAcknowledge);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, cap + 16) & 0xff, status::kAcknowledge);
    h.ecam_write<uint32_t>(dev, cap + 8, 0x2000);  // device config, a dword
    h.ecam_write<uint32_t>(dev, cap + 12, 4);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, cap + 16), 0xa3a2'a1a0u);
    h.ecam_write<uint32_t>(dev, cap + 8, bar_size - 2);  // past the BAR: no access
    h.ecam_write<uint32_t>(dev, cap + 16, 0x1234);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, cap + 16), 0x1234u);
}

// Issue 18: an empty access never reaches the function, whichever part of the BAR or config
// space it points at (the ISR read wrote data[0], the MSI-X table overflowed the heap).
TEST_F(VirtioPciTest, EmptyAccessesNeverReachTheFunction) {
    driver.enable_msix(3);
    for (uint64_t offset : {0x0ull, 0x14ull, 0x1000ull, 0x2000ull, 0x3000ull, 0x4000ull, 0x400cull,
                            0x402cull, 0x5000ull}) {
        EXPECT_FALSE(h.mmio.read(GuestAddr(kBar + offset), {})) << offset;
        EXPECT_FALSE(h.mmio.write(GuestAddr(kBar + offset), {})) << offset;
    }
    EXPECT_FALSE(h.mmio.write(GuestAddr(0xe000'0000 + (uint64_t{dev.device} << 15)), {}));
    EXPECT_EQ(h.mmio_read<uint32_t>(kBar + 0x4000 + 2 * 16 + 12), 0u);  // still unmasked
    EXPECT_EQ(msi(2).routes, 1u);
}

TEST_F(VirtioPciTest, IoeventfdsFollowTheBar) {
    auto registered = [&] {
        std::vector<uint64_t> at;
        for (const auto& e : h.platform.ioeventfds) {
            EXPECT_EQ(e.len, 2u);
            at.push_back(e.addr.value());
        }
        return at;
    };
    EXPECT_EQ(registered(), (std::vector<uint64_t>{kBar + 0x3000, kBar + 0x3004}));
    driver.negotiate(kFeatureVersion1);
    driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    EXPECT_EQ(h.platform.ioeventfds[1].fd, log.activated->kicks[1]->get());  // the same kick
    h.ecam_write<uint32_t>(dev, reg::kBar0, static_cast<uint32_t>(kBar + 0x10'0000));
    EXPECT_EQ(registered(), (std::vector<uint64_t>{kBar + 0x10'3000, kBar + 0x10'3004}));
    h.ecam_write<uint16_t>(dev, reg::kCommand, 0);
    EXPECT_TRUE(registered().empty());
}

TEST_F(VirtioPciTest, OverlappingBarsCostTheIoeventfdsNotTheVmm) {
    auto other = std::make_shared<VirtioPciFunction>(std::make_unique<FakeDevice>(other_log),
                                                     h.platform, guest.memory());
    const PciAddr other_addr{0, h.bridge.attach(other, devices::pci::RootBusSlot{}).device, 0};
    testing::PciDriver other_driver(h, other_addr);
    other_driver.assign_bar(kBar);                // on top of the first function's BAR
    EXPECT_EQ(h.platform.ioeventfds.size(), 2u);  // KVM refused the second set
    other_driver.negotiate(kFeatureVersion1);
    other_driver.set_status(kDriverOkStatus);
    ASSERT_TRUE(other_log.activated);
    other_driver.kick(0);  // exits to the handler on top, which kicks the same EventFd
    EXPECT_EQ(other_log.activated->kicks[0]->consume(), 1u);

    other_driver.assign_bar(kBar + 0x10'0000);  // moved apart: both get ioeventfds
    EXPECT_EQ(h.platform.ioeventfds.size(), 4u);
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
