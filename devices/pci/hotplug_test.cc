// PCIe native hot-plug on the root ports, with the test playing pciehp through ECAM.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "devices/pci/config_space.h"
#include "devices/pci/host_bridge.h"
#include "devices/pci/test_harness.h"

namespace mvmm::devices::pci {
namespace {

using testing::PciAddr;
using testing::PciHarness;

// Slot register offsets in the PCI Express capability, and their bits (PCIe Base 4.0, 7.5.3).
constexpr uint16_t kLinkStatus = 0x12, kSlotCaps = 0x14, kSlotControl = 0x18, kSlotStatus = 0x1a;
constexpr uint16_t kLinkActive = 1 << 13;
constexpr uint16_t kAbpe = 1 << 0, kCcie = 1 << 4, kHpie = 1 << 5;
constexpr uint16_t kPowerIndicatorOff = 3 << 8, kPowerIndicatorOn = 1 << 8;
constexpr uint16_t kPowerOff = 1 << 10, kDllsce = 1 << 12;
constexpr uint16_t kAbp = 1 << 0, kPdc = 1 << 3, kCc = 1 << 4, kPds = 1 << 6, kDllsc = 1 << 8;
constexpr uint64_t kBarAddress = 0xc000'0000;

class Echo : public IoHandler {
  public:
    void read(uint64_t offset, std::span<uint8_t> data) override {
        std::memcpy(data.data(), &offset, std::min(data.size(), sizeof offset));
    }
    void write(uint64_t, std::span<const uint8_t>) override {}
};

class OneBarFunction : public PciFunction {
  public:
    OneBarFunction() : config_(ConfigSpace::endpoint({.vendor_id = 0x1234, .device_id = 0x2222})) {
        bar_ = {.index = 0, .kind = BarKind::Memory32, .size = 0x1000};
        bar_.handler = std::make_shared<Echo>();
        config_.add_bar(bar_);
    }
    void config_read(uint16_t offset, std::span<uint8_t> data) override {
        config_.read(offset, data);
    }
    void config_write(uint16_t offset, std::span<const uint8_t> data) override {
        config_.write(offset, data);
    }
    std::vector<Bar> bars() const override { return {bar_}; }
    void bar_mapped(uint8_t, std::optional<uint64_t> base) override { mapped = base; }

    std::optional<uint64_t> mapped;

  private:
    ConfigSpace config_;
    Bar bar_;
};

// The guest's side: one root port at 00:01.0 with bus 1 behind it, MSI enabled, and the
// notifications pciehp enables on a slot with an attention button.
class Hotplug : public ::testing::Test {
  protected:
    void SetUp() override {
        h.bridge.set_unplug_handler([this](uint8_t port, std::shared_ptr<PciFunction> f) {
            released.emplace_back(port, std::move(f));
        });
        port_number = h.bridge.add_empty_root_port().port;
        express = find_capability(0x10);
        msi = find_capability(0x05);
        h.ecam_write<uint32_t>(kPort, reg::kPrimaryBus, 1u << 8 | 1u << 16);
        h.ecam_write<uint16_t>(kPort, reg::kMemoryBase, 0xc000);
        h.ecam_write<uint16_t>(kPort, reg::kMemoryLimit, 0xc000);
        h.ecam_write<uint16_t>(kPort, reg::kCommand, command::kMemorySpace | command::kBusMaster);
        h.ecam_write<uint32_t>(kPort, msi + 4, 0xfee0'0000);
        h.ecam_write<uint16_t>(kPort, msi + 12, 0x41);
        h.ecam_write<uint16_t>(kPort, msi + 2, 1);  // MSI Enable
        control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOff | kPowerOff);
        clear_events();
    }

    uint8_t find_capability(uint8_t id) {
        for (auto at = h.ecam_read<uint8_t>(kPort, reg::kCapabilities); at != 0;
             at = h.ecam_read<uint8_t>(kPort, at + 1))
            if (h.ecam_read<uint8_t>(kPort, at) == id) return at;
        ADD_FAILURE() << "no capability " << int(id);
        return 0;
    }
    uint16_t status() { return h.ecam_read<uint16_t>(kPort, express + kSlotStatus); }
    uint16_t link_status() { return h.ecam_read<uint16_t>(kPort, express + kLinkStatus); }
    void control(uint16_t value) { h.ecam_write<uint16_t>(kPort, express + kSlotControl, value); }
    uint16_t control() { return h.ecam_read<uint16_t>(kPort, express + kSlotControl); }
    void clear_events() {
        h.ecam_write<uint16_t>(kPort, express + kSlotStatus, kAbp | kPdc | kCc | kDllsc);
    }
    unsigned interrupts() { return h.platform.vectors.at(0)->triggers.load(); }

    // pciehp's enable: power on, indicator on, then the driver assigns and enables the BAR.
    void enable_slot() {
        control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOn);
        clear_events();
        h.ecam_write<uint32_t>(kCard, reg::kBar0, kBarAddress);
        h.ecam_write<uint16_t>(kCard, reg::kCommand, command::kMemorySpace);
    }

    static constexpr PciAddr kPort{0, 1, 0};
    static constexpr PciAddr kCard{1, 0, 0};
    PciHarness h;
    uint8_t port_number = 0;
    uint8_t express = 0;
    uint8_t msi = 0;
    std::vector<std::pair<uint8_t, std::shared_ptr<PciFunction>>> released;
};

TEST_F(Hotplug, SlotCapabilitiesAreWhatPciehpNeeds) {
    const auto caps = h.ecam_read<uint32_t>(kPort, express + kSlotCaps);
    EXPECT_EQ(caps & 0x7f, 0x5bu);       // ABP, PCP, AIP, PIP, HPC; no MRL, no surprise
    EXPECT_EQ(caps & (1u << 18), 0u);    // command completed is implemented
    EXPECT_EQ(caps >> 19, port_number);  // physical slot number
    EXPECT_EQ(h.ecam_read<uint16_t>(kPort, msi + 2) & 0x80, 0x80);  // 64-bit MSI
    EXPECT_EQ(status() & kPds, 0);
    EXPECT_EQ(h.platform.vectors.at(0)->message->data, 0x41u);
}

TEST_F(Hotplug, EverySlotControlWriteCompletesAndInterruptsOnce) {
    const unsigned before = interrupts();
    control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOff | kPowerOff);
    EXPECT_EQ(status() & kCc, kCc);
    EXPECT_EQ(interrupts(), before + 1);
    // Still pending: another command completes but sends no second message (6.7.3.4).
    control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOff | kPowerOff);
    EXPECT_EQ(interrupts(), before + 1);
    clear_events();
    EXPECT_EQ(status() & kCc, 0);
    control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOff | kPowerOff);
    EXPECT_EQ(interrupts(), before + 2);
    // A write to Slot Status alone is no command.
    clear_events();
    EXPECT_EQ(status() & kCc, 0);
    EXPECT_EQ(interrupts(), before + 2);
}

TEST_F(Hotplug, NoMessageWithoutHotPlugInterruptEnable) {
    control(kAbpe | kCcie | kDllsce | kPowerIndicatorOff | kPowerOff);
    clear_events();
    const unsigned before = interrupts();
    h.bridge.plug(port_number, std::make_shared<OneBarFunction>());
    EXPECT_EQ(status() & (kPdc | kDllsc), kPdc | kDllsc);  // pciehp's poll mode sees them
    EXPECT_EQ(interrupts(), before);
}

TEST_F(Hotplug, PlugShowsTheCardAndRaisesLinkChange) {
    auto card = std::make_shared<OneBarFunction>();
    EXPECT_EQ(h.ecam_read<uint32_t>(kCard, 0), 0xffff'ffffu);
    const unsigned before = interrupts();
    h.bridge.plug(port_number, card);
    EXPECT_EQ(status() & (kPds | kPdc | kDllsc), kPds | kPdc | kDllsc);
    EXPECT_EQ(link_status() & kLinkActive, kLinkActive);
    EXPECT_EQ(interrupts(), before + 1);
    EXPECT_EQ(h.ecam_read<uint32_t>(kCard, 0), 0x2222'1234u);
    enable_slot();
    EXPECT_EQ(h.mmio_read<uint32_t>(kBarAddress + 0x10), 0x10u);
    EXPECT_EQ(h.bridge.slots().at(0).occupied, true);
    EXPECT_EQ(h.bridge.slots().at(0).free, false);
}

TEST_F(Hotplug, TheGuestReleasesAfterTheButtonAndTheBarLeaves) {
    auto card = std::make_shared<OneBarFunction>();
    h.bridge.plug(port_number, card);
    enable_slot();
    const uint64_t mmio_regions = h.mmio.stats().by_region.size();

    const unsigned before = interrupts();
    h.bridge.request_unplug(port_number);
    EXPECT_EQ(status() & kAbp, kAbp);
    EXPECT_EQ(interrupts(), before + 1);
    EXPECT_TRUE(h.bridge.slots().at(0).unplug_requested);
    EXPECT_THROW(h.bridge.request_unplug(port_number), std::runtime_error);  // busy
    EXPECT_TRUE(released.empty());
    clear_events();

    // pciehp after its 5 s: the driver is gone, power off, then the indicator off.
    control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOn | kPowerOff);
    ASSERT_EQ(released.size(), 1u);
    EXPECT_EQ(released[0].first, port_number);
    EXPECT_EQ(released[0].second, card);
    EXPECT_EQ(card->mapped, std::nullopt);
    EXPECT_EQ(h.mmio_read<uint32_t>(kBarAddress + 0x10), 0xffff'ffffu);  // no stale BAR
    EXPECT_EQ(h.mmio.stats().by_region.size(), mmio_regions - 1);
    EXPECT_EQ(h.ecam_read<uint32_t>(kCard, 0), 0xffff'ffffu);
    EXPECT_EQ(status() & (kPds | kPdc | kDllsc), kPdc | kDllsc);
    EXPECT_EQ(link_status() & kLinkActive, 0);
    released.clear();
    EXPECT_EQ(card.use_count(), 1);  // nothing on the bus holds it: ours to destroy

    // Not free until pciehp has turned the power indicator off.
    EXPECT_THROW(h.bridge.plug(port_number, std::make_shared<OneBarFunction>()),
                 std::runtime_error);
    control(kAbpe | kCcie | kHpie | kDllsce | kPowerIndicatorOff | kPowerOff);
    EXPECT_TRUE(h.bridge.slots().at(0).free);
    EXPECT_NO_THROW(h.bridge.plug(port_number, std::make_shared<OneBarFunction>()));
}

TEST_F(Hotplug, BadRequestsChangeNothing) {
    EXPECT_THROW(h.bridge.request_unplug(port_number), std::runtime_error);  // empty
    EXPECT_THROW(h.bridge.request_unplug(0), std::runtime_error);
    EXPECT_THROW(h.bridge.request_unplug(port_number + 1), std::runtime_error);
    EXPECT_THROW(h.bridge.plug(port_number + 1, std::make_shared<OneBarFunction>()),
                 std::runtime_error);
    auto card = std::make_shared<OneBarFunction>();
    h.bridge.plug(port_number, card);
    clear_events();
    const auto regions = h.mmio.stats().by_region.size();
    EXPECT_THROW(h.bridge.plug(port_number, std::make_shared<OneBarFunction>()),
                 std::runtime_error);
    EXPECT_EQ(h.mmio.stats().by_region.size(), regions);
    EXPECT_EQ(status() & (kPdc | kDllsc | kAbp), 0);
    EXPECT_EQ(h.ecam_read<uint32_t>(kCard, 0), 0x2222'1234u);
}

TEST_F(Hotplug, ASlotTheGuestNeverPoweredIsReleasedAtOnce) {
    auto card = std::make_shared<OneBarFunction>();
    h.bridge.plug(port_number, card);
    h.bridge.request_unplug(port_number);
    ASSERT_EQ(released.size(), 1u);
    EXPECT_EQ(status() & kPds, 0);
}

TEST_F(Hotplug, ACardPresentAtBootIsPoweredWithItsIndicatorOn) {
    const RootBusAddress at = h.bridge.attach(std::make_shared<OneBarFunction>(), NewRootPort{});
    const PciAddr port{0, at.device, at.function};
    EXPECT_EQ(h.ecam_read<uint16_t>(port, express + kSlotStatus), kPds);
    EXPECT_EQ(h.ecam_read<uint16_t>(port, express + kSlotControl) & (kPowerOff | 3 << 8),
              kPowerIndicatorOn);
    // Powering it off is the guest releasing it, as for a hot-plugged one.
    h.ecam_write<uint16_t>(port, express + kSlotControl, kPowerOff);
    ASSERT_EQ(released.size(), 1u);
    EXPECT_EQ(released[0].first, at.port);
}

}  // namespace
}  // namespace mvmm::devices::pci
