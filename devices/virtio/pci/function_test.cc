#include "devices/virtio/pci/function.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <map>

#include "devices/pci/test_harness.h"
#include "devices/virtio/test_driver.h"

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

class VirtioPciTest : public ::testing::Test {
  protected:
    VirtioPciTest() {
        function = std::make_shared<VirtioPciFunction>(std::make_unique<FakeDevice>(log),
                                                       h.platform, guest.memory());
        dev = {0, h.bridge.attach(function, devices::pci::RootBusSlot{}).device, 0};
        // What Linux does for a BAR: size it with decoding off, assign it, enable decoding.
        h.ecam_write<uint32_t>(dev, reg::kBar0, 0xffff'ffff);
        h.ecam_write<uint32_t>(dev, reg::kBar0 + 4, 0xffff'ffff);
        bar_size = ~(uint64_t{h.ecam_read<uint32_t>(dev, reg::kBar0 + 4)} << 32 |
                     (h.ecam_read<uint32_t>(dev, reg::kBar0) & ~0xfu)) +
                   1;
        h.ecam_write<uint32_t>(dev, reg::kBar0, static_cast<uint32_t>(kBar));
        h.ecam_write<uint32_t>(dev, reg::kBar0 + 4, 0);
        h.ecam_write<uint16_t>(dev, reg::kCommand, command::kMemorySpace | command::kBusMaster);
    }

    template <class T>
    T common(size_t offset) {
        return h.mmio_read<T>(kBar + offset);
    }
    template <class T>
    void set_common(size_t offset, T v) {
        h.mmio_write<T>(kBar + offset, v);
    }
    uint8_t status() { return common<uint8_t>(offsetof(CommonConfig, device_status)); }
    void set_status(uint8_t v) { set_common<uint8_t>(offsetof(CommonConfig, device_status), v); }
    void set_driver_features(uint64_t features) {
        for (uint32_t select : {0u, 1u}) {
            set_common<uint32_t>(offsetof(CommonConfig, driver_feature_select), select);
            set_common<uint32_t>(offsetof(CommonConfig, driver_feature),
                                 static_cast<uint32_t>(features >> (32 * select)));
        }
    }
    uint64_t device_features() {
        uint64_t features = 0;
        for (uint32_t select : {0u, 1u}) {
            set_common<uint32_t>(offsetof(CommonConfig, device_feature_select), select);
            features |= uint64_t{common<uint32_t>(offsetof(CommonConfig, device_feature))}
                        << (32 * select);
        }
        return features;
    }
    // Capabilities by id (and cfg_type for virtio's vendor capabilities).
    std::map<std::pair<uint8_t, uint8_t>, uint8_t> capabilities() {
        std::map<std::pair<uint8_t, uint8_t>, uint8_t> caps;
        for (uint8_t at = h.ecam_read<uint8_t>(dev, reg::kCapabilities); at != 0;
             at = h.ecam_read<uint8_t>(dev, at + 1)) {
            const uint8_t id = h.ecam_read<uint8_t>(dev, at);
            caps[{id, id == 0x09 ? h.ecam_read<uint8_t>(dev, at + 3) : uint8_t{0}}] = at;
        }
        return caps;
    }
    void enable_msix() {
        const uint8_t cap = capabilities().at({0x11, 0});
        h.ecam_write<uint16_t>(dev, cap + 2, 0x8000);
        for (uint16_t v = 0; v < 3; ++v) {
            const uint64_t entry = kBar + VirtioPciFunction::kMsixTableOffset + v * 16;
            h.mmio_write<uint32_t>(entry, 0xfee0'0000);
            h.mmio_write<uint32_t>(entry + 8, 0x40 + v);
            h.mmio_write<uint32_t>(entry + 12, 0);  // unmasked
        }
    }
    // The driver side of virtio 1.2, 3.1.1, up to FEATURES_OK.
    void negotiate(uint64_t features) {
        set_status(0);
        set_status(status::kAcknowledge);
        set_status(status::kAcknowledge | status::kDriver);
        set_driver_features(features);
        set_status(status::kAcknowledge | status::kDriver | status::kFeaturesOk);
    }
    void setup_queue(uint16_t index, uint16_t size, uint16_t vector, GuestAddr desc,
                     GuestAddr avail, GuestAddr used) {
        set_common<uint16_t>(offsetof(CommonConfig, queue_select), index);
        set_common<uint16_t>(offsetof(CommonConfig, queue_size), size);
        set_common<uint16_t>(offsetof(CommonConfig, queue_msix_vector), vector);
        // Linux writes the 64-bit addresses as two dwords.
        set_common<uint32_t>(offsetof(CommonConfig, queue_desc), uint32_t(desc.value()));
        set_common<uint32_t>(offsetof(CommonConfig, queue_desc) + 4, desc.value() >> 32);
        set_common<uint64_t>(offsetof(CommonConfig, queue_driver), avail.value());
        set_common<uint64_t>(offsetof(CommonConfig, queue_device), used.value());
        set_common<uint16_t>(offsetof(CommonConfig, queue_enable), 1);
    }
    const devices::testing::FakePlatform::Vector& msi(unsigned v) {
        return *h.platform.vectors.at(v);
    }

    static constexpr uint8_t kDriverOkStatus =
        status::kAcknowledge | status::kDriver | status::kFeaturesOk | status::kDriverOk;
    devices::testing::PciHarness h;
    testing::TestGuest guest;
    DeviceLog log;
    std::shared_ptr<VirtioPciFunction> function;
    PciAddr dev;
    uint64_t bar_size = 0;
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
    const auto caps = capabilities();
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
    enable_msix();
    negotiate(kFeatureVersion1 | kFeatureEventIdx);
    EXPECT_EQ(log.resets, 1u);
    EXPECT_EQ(device_features(), kFeatureVersion1 | kFeatureEventIdx | kDeviceFeature);
    EXPECT_EQ(status() & status::kFeaturesOk, status::kFeaturesOk);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, num_queues)), 2);

    set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, config_msix_vector)), 0);
    set_common<uint16_t>(offsetof(CommonConfig, queue_select), 1);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_size)), 128);  // the maximum
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_notify_off)), 1);
    setup_queue(0, 64, 1, GuestAddr(0x1'0000'1000), GuestAddr(0x2000), GuestAddr(0x3000));
    setup_queue(1, 32, 2, GuestAddr(0x4000), GuestAddr(0x5000), GuestAddr(0x6000));
    EXPECT_EQ(common<uint64_t>(offsetof(CommonConfig, queue_driver)), 0x5000u);
    EXPECT_FALSE(log.activated);

    set_status(kDriverOkStatus);
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
    EXPECT_EQ(status(), kDriverOkStatus);

    // Kicks: a notify write (no ioeventfd in tests) signals the queue's EventFd.
    EXPECT_TRUE(h.mmio_write<uint16_t>(kBar + 0x3004, 1));
    EXPECT_EQ(context.kicks[1]->consume(), 1u);
    EXPECT_EQ(context.kicks[0]->consume(), 0u);

    // Interrupts: each queue's MSI-X vector, and the config vector.
    context.interrupt.notify_queue(1);
    EXPECT_EQ(msi(2).triggers, 1u);
    EXPECT_EQ(*msi(2).message, (MsiMessage{0xfee0'0000, 0x42}));
    const auto generation = common<uint8_t>(offsetof(CommonConfig, config_generation));
    context.interrupt.notify_config();
    EXPECT_EQ(msi(0).triggers, 1u);
    EXPECT_EQ(common<uint8_t>(offsetof(CommonConfig, config_generation)), uint8_t(generation + 1));
}

TEST_F(VirtioPciTest, ResetReturnsEverythingToItsInitialState) {
    enable_msix();
    negotiate(kFeatureVersion1);
    setup_queue(0, 64, 1, GuestAddr(0x1000), GuestAddr(0x2000), GuestAddr(0x3000));
    set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    h.mmio_write<uint16_t>(kBar + 0x3000, 0);  // a kick nobody consumed

    set_status(0);
    EXPECT_EQ(log.resets, 2u);
    EXPECT_FALSE(log.activated);
    EXPECT_EQ(status(), 0);
    set_common<uint16_t>(offsetof(CommonConfig, queue_select), 0);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_size)), 128);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_enable)), 0);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_msix_vector)), kNoVectorValue);
    EXPECT_EQ(common<uint64_t>(offsetof(CommonConfig, queue_desc)), 0u);

    negotiate(kFeatureVersion1);
    setup_queue(0, 64, 1, GuestAddr(0x1000), GuestAddr(0x2000), GuestAddr(0x3000));
    set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    EXPECT_EQ(log.activated->kicks[0]->consume(), 0u);  // the stale kick is gone
}

TEST_F(VirtioPciTest, FeaturesOkNeedsVersion1AndOfferedFeaturesOnly) {
    negotiate(kFeatureEventIdx);  // no VERSION_1
    EXPECT_EQ(status() & status::kFeaturesOk, 0);
    negotiate(kFeatureVersion1 | kFeatureIndirectDesc);  // not offered
    EXPECT_EQ(status() & status::kFeaturesOk, 0);
    negotiate(kFeatureVersion1);
    EXPECT_EQ(status() & status::kFeaturesOk, status::kFeaturesOk);
    set_driver_features(kFeatureVersion1 | kDeviceFeature);  // too late: ignored
    set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    EXPECT_EQ(log.activated->features, kFeatureVersion1);
}

TEST_F(VirtioPciTest, FailedActivationSetsNeedsResetAndInterrupts) {
    enable_msix();
    log.activate_result = false;
    negotiate(kFeatureVersion1);
    set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
    set_status(kDriverOkStatus);
    EXPECT_EQ(status(), kDriverOkStatus | status::kNeedsReset);
    EXPECT_EQ(msi(0).triggers, 1u);
    set_status(0);
    EXPECT_EQ(status(), 0);
}

TEST_F(VirtioPciTest, DriverOkWithoutFeaturesOkNeedsReset) {
    set_status(status::kAcknowledge | status::kDriver);
    set_status(status::kAcknowledge | status::kDriver | status::kDriverOk);
    EXPECT_FALSE(log.activated);
    EXPECT_NE(status() & status::kNeedsReset, 0);
}

TEST_F(VirtioPciTest, DeviceReportedCorruptionShowsInTheStatus) {
    negotiate(kFeatureVersion1);
    set_status(kDriverOkStatus);
    log.needs_reset = true;
    EXPECT_EQ(status(), kDriverOkStatus | status::kNeedsReset);
    set_status(0);
    EXPECT_EQ(status(), 0);  // even if the device still says so: Linux waits for 0
}

TEST_F(VirtioPciTest, VectorsTheTableLacksReadBackAsNoVector) {
    set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 3);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, config_msix_vector)), kNoVectorValue);
    set_common<uint16_t>(offsetof(CommonConfig, queue_select), 0);
    set_common<uint16_t>(offsetof(CommonConfig, queue_msix_vector), 2);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_msix_vector)), 2);
    set_common<uint16_t>(offsetof(CommonConfig, queue_msix_vector), 7);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_msix_vector)), kNoVectorValue);
    set_common<uint16_t>(offsetof(CommonConfig, queue_select), 2);  // no such queue
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_size)), 0);
    set_common<uint16_t>(offsetof(CommonConfig, queue_size), 16);
    EXPECT_EQ(common<uint16_t>(offsetof(CommonConfig, queue_size)), 0);
}

TEST_F(VirtioPciTest, IsrReportsInterruptsWithoutMsixAndClearsOnRead) {
    negotiate(kFeatureVersion1);
    setup_queue(0, 64, kNoVectorValue, GuestAddr(0x1000), GuestAddr(0x2000), GuestAddr(0x3000));
    set_status(kDriverOkStatus);
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
    const uint8_t cap = capabilities().at({0x09, 5});
    h.ecam_write<uint8_t>(dev, cap + 4, 0);
    h.ecam_write<uint32_t>(dev, cap + 8, offsetof(CommonConfig, device_status));
    h.ecam_write<uint32_t>(dev, cap + 12, 1);
    h.ecam_write<uint32_t>(dev, cap + 16, status::kAcknowledge);
    EXPECT_EQ(status(), status::kAcknowledge);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, cap + 16) & 0xff, status::kAcknowledge);
    h.ecam_write<uint32_t>(dev, cap + 8, 0x2000);  // device config, a dword
    h.ecam_write<uint32_t>(dev, cap + 12, 4);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, cap + 16), 0xa3a2'a1a0u);
    h.ecam_write<uint32_t>(dev, cap + 8, bar_size - 2);  // past the BAR: no access
    h.ecam_write<uint32_t>(dev, cap + 16, 0x1234);
    EXPECT_EQ(h.ecam_read<uint32_t>(dev, cap + 16), 0x1234u);
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
    negotiate(kFeatureVersion1);
    set_status(kDriverOkStatus);
    ASSERT_TRUE(log.activated);
    EXPECT_EQ(h.platform.ioeventfds[1].fd, log.activated->kicks[1]->get());  // the same kick
    h.ecam_write<uint32_t>(dev, reg::kBar0, static_cast<uint32_t>(kBar + 0x10'0000));
    EXPECT_EQ(registered(), (std::vector<uint64_t>{kBar + 0x10'3000, kBar + 0x10'3004}));
    h.ecam_write<uint16_t>(dev, reg::kCommand, 0);
    EXPECT_TRUE(registered().empty());
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
