#include "devices/pci/host_bridge.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "devices/pci/config_space.h"
#include "devices/pci/test_harness.h"

namespace mvmm::devices::pci {
namespace {

using testing::PciAddr;
using testing::PciHarness;

// Reads return the offset inside the BAR, so a test sees where an access landed.
class EchoHandler : public IoHandler {
  public:
    void read(uint64_t offset, std::span<uint8_t> data) override {
        std::memcpy(data.data(), &offset, std::min(data.size(), sizeof offset));
    }
    void write(uint64_t offset, std::span<const uint8_t>) override { writes.push_back(offset); }
    std::vector<uint64_t> writes;
};

class TestFunction : public PciFunction {
  public:
    explicit TestFunction(std::vector<Bar> bars)
        : config_(ConfigSpace::endpoint({.vendor_id = 0x1234, .device_id = 0x1111})),
          bars_(std::move(bars)) {
        for (auto& bar : bars_) {
            bar.handler = std::make_shared<EchoHandler>();
            config_.add_bar(bar);
        }
    }
    void config_read(uint16_t offset, std::span<uint8_t> data) override {
        config_.read(offset, data);
    }
    void config_write(uint16_t offset, std::span<const uint8_t> data) override {
        config_.write(offset, data);
    }
    std::vector<Bar> bars() const override { return bars_; }
    void bar_mapped(uint8_t index, std::optional<uint64_t> base) override {
        mapped.emplace_back(index, base);
    }

    std::vector<std::pair<uint8_t, std::optional<uint64_t>>> mapped;

  private:
    ConfigSpace config_;
    std::vector<Bar> bars_;
};

std::shared_ptr<TestFunction> three_bar_function() {
    return std::make_shared<TestFunction>(std::vector<Bar>{
        {.index = 0, .kind = BarKind::Memory32, .size = 0x1000},
        {.index = 2, .kind = BarKind::Memory64, .size = 0x4000},
        {.index = 4, .kind = BarKind::Io, .size = 0x20},
    });
}

constexpr uint16_t kBar0 = reg::kBar0, kBar2 = reg::kBar0 + 8, kBar4 = reg::kBar0 + 16;

TEST(PciHostBridge, LegacyPortsAndEcamReachTheSameRegisters) {
    PciHarness h;
    const PciAddr host{0, 0, 0};
    EXPECT_EQ(h.ecam_read<uint32_t>(host, 0), 0x0008'1b36u);
    EXPECT_EQ(h.legacy_read<uint32_t>(host, 0), 0x0008'1b36u);
    EXPECT_EQ(h.legacy_read<uint32_t>(host, 8) >> 8, 0x060000u);  // host bridge class
    EXPECT_EQ(h.legacy_read<uint8_t>(host, 1), 0x1b);
    EXPECT_EQ(h.legacy_read<uint16_t>(host, 2), 0x0008);

    h.legacy_write<uint8_t>(host, reg::kInterruptLine, 0x5a);
    EXPECT_EQ(h.ecam_read<uint8_t>(host, reg::kInterruptLine), 0x5a);
    h.ecam_write<uint8_t>(host, reg::kCacheLineSize, 0x10);
    EXPECT_EQ(h.legacy_read<uint32_t>(host, reg::kCacheLineSize) & 0xff, 0x10u);
    h.legacy_write<uint16_t>(host, reg::kCommand, 0x0006);
    EXPECT_EQ(h.ecam_read<uint16_t>(host, reg::kCommand), 0x0006);
}

TEST(PciHostBridge, AbsentFunctionsAndDisabledCyclesReadAllOnes) {
    PciHarness h;
    EXPECT_EQ(h.ecam_read<uint32_t>({0, 31, 7}, 0), 0xffff'ffffu);
    EXPECT_EQ(h.legacy_read<uint32_t>({0, 3, 0}, 0), 0xffff'ffffu);
    EXPECT_EQ(h.ecam_read<uint16_t>({7, 0, 0}, 0), 0xffff);  // no such bus
    // A misaligned ECAM access is not a config cycle.
    EXPECT_EQ(h.ecam_read<uint16_t>({0, 0, 0}, 1), 0xffff);

    uint32_t all = 0xffff'ffff, no_enable = 0;
    h.pio.write(PioPort(0xcf8), {reinterpret_cast<uint8_t*>(&all), 4});
    uint32_t readback = 0;
    h.pio.read(PioPort(0xcf8), {reinterpret_cast<uint8_t*>(&readback), 4});
    EXPECT_EQ(readback, 0x80ff'fffcu);  // reserved bits read 0
    h.pio.write(PioPort(0xcf8), {reinterpret_cast<uint8_t*>(&no_enable), 4});
    uint32_t data = 0;
    h.pio.read(PioPort(0xcfc), {reinterpret_cast<uint8_t*>(&data), 4});
    EXPECT_EQ(data, 0xffff'ffffu);  // bit 31 clear: no config cycle
}

TEST(PciHostBridge, ResetControlSharesTheConfigAddressDword) {
    class Recorder : public IoHandler {
      public:
        void read(uint64_t, std::span<uint8_t> data) override { data[0] = 0x02; }
        void write(uint64_t offset, std::span<const uint8_t> data) override {
            writes.emplace_back(offset, data[0]);
        }
        std::vector<std::pair<uint64_t, uint8_t>> writes;
    };
    MmioSpace mmio;
    PioSpace pio;
    auto reset = std::make_shared<Recorder>();
    testing::FakePlatform platform;
    PciHostBridge bridge(testing::test_layout(), mmio, pio, platform, reset);
    uint8_t byte = 0x06;
    pio.write(PioPort(0xcf9), {&byte, 1});
    ASSERT_EQ(reset->writes.size(), 1u);
    EXPECT_EQ(reset->writes[0], (std::pair<uint64_t, uint8_t>(0, 0x06)));
    pio.read(PioPort(0xcf9), {&byte, 1});
    EXPECT_EQ(byte, 0x02);
    uint32_t address = 0x8000'0000;
    pio.write(PioPort(0xcf8), {reinterpret_cast<uint8_t*>(&address), 4});
    EXPECT_EQ(reset->writes.size(), 1u);  // a dword is CONFIG_ADDRESS
}

TEST(PciHostBridge, BarsMoveAndFollowTheDecodeBits) {
    PciHarness h;
    auto fn = three_bar_function();
    const RootBusAddress at = h.bridge.attach(fn, RootBusSlot{});
    EXPECT_EQ(at.device, 1);
    const PciAddr a{0, at.device, at.function};

    h.ecam_write<uint32_t>(a, kBar0, 0xc000'0000);
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc000'0010), 0xffff'ffffu);  // decoding is off
    h.ecam_write<uint16_t>(a, reg::kCommand, command::kMemorySpace);
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc000'0010), 0x10u);
    ASSERT_FALSE(fn->mapped.empty());
    EXPECT_EQ(fn->mapped.back(), std::pair(uint8_t{0}, std::optional<uint64_t>(0xc000'0000)));

    h.ecam_write<uint32_t>(a, kBar0, 0xc010'0000);  // the guest moves it
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc000'0010), 0xffff'ffffu);
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc010'0020), 0x20u);

    // A 64-bit BAR written a dword at a time maps once both halves are in.
    h.ecam_write<uint32_t>(a, kBar2, 0);
    h.ecam_write<uint32_t>(a, kBar2 + 4, 0x40);
    EXPECT_EQ(h.mmio_read<uint32_t>(0x40'0000'0008), 0x8u);

    h.ecam_write<uint32_t>(a, kBar4, 0x2000);
    uint8_t port_byte = 0;
    EXPECT_FALSE(h.pio.read(PioPort(0x2004), {&port_byte, 1}));
    h.ecam_write<uint16_t>(a, reg::kCommand, command::kMemorySpace | command::kIoSpace);
    EXPECT_TRUE(h.pio.read(PioPort(0x2004), {&port_byte, 1}));
    EXPECT_EQ(port_byte, 4);

    h.ecam_write<uint16_t>(a, reg::kCommand, command::kIoSpace);  // memory decoding off
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc010'0020), 0xffff'ffffu);
    EXPECT_EQ(h.mmio_read<uint32_t>(0x40'0000'0008), 0xffff'ffffu);
    EXPECT_EQ(fn->mapped.back(), std::pair(uint8_t{2}, std::optional<uint64_t>()));
}

TEST(PciHostBridge, BarsOutsideTheHostWindowsDoNotDecode) {
    PciHarness h;
    auto fn = three_bar_function();
    const PciAddr a{0, h.bridge.attach(fn, RootBusSlot{}).device, 0};
    h.ecam_write<uint16_t>(a, reg::kCommand, command::kMemorySpace | command::kIoSpace);
    h.ecam_write<uint32_t>(a, kBar0, 0x8000'0000);  // in RAM, say
    EXPECT_EQ(h.mmio_read<uint32_t>(0x8000'0000), 0xffff'ffffu);
    h.ecam_write<uint32_t>(a, kBar0, 0xe000'0000);  // over ECAM itself
    EXPECT_EQ(h.ecam_read<uint32_t>({0, 0, 0}, 0), 0x0008'1b36u);
    h.ecam_write<uint32_t>(a, kBar4, 0x0400);  // below the I/O window
    uint8_t b;
    EXPECT_FALSE(h.pio.read(PioPort(0x0400), {&b, 1}));
    EXPECT_TRUE(fn->mapped.empty());
}

// Programs a root port as Linux does when no firmware ran: bus numbers, then windows.
void program_port(PciHarness& h, PciAddr port, uint8_t secondary) {
    h.ecam_write<uint32_t>(port, reg::kPrimaryBus,
                           uint32_t{secondary} << 8 | uint32_t{secondary} << 16);
}

TEST(PciHostBridge, RootPortForwardsConfigCyclesToItsBusNumbers) {
    PciHarness h;
    const RootBusAddress at = h.bridge.attach(three_bar_function(), NewRootPort{});
    EXPECT_EQ(at.device, 1);
    EXPECT_EQ(at.function, 0);
    const PciAddr port{0, 1, 0};
    EXPECT_EQ(h.ecam_read<uint32_t>(port, 0), 0x000c'1b36u);
    EXPECT_EQ(h.ecam_read<uint32_t>(port, reg::kRevision) >> 8, 0x060400u);
    EXPECT_EQ(h.ecam_read<uint8_t>(port, reg::kHeaderType), 0x01);
    const auto express = h.ecam_read<uint8_t>(port, reg::kCapabilities);
    EXPECT_EQ(h.ecam_read<uint8_t>(port, express), 0x10);
    const auto caps = h.ecam_read<uint16_t>(port, express + 2);
    EXPECT_EQ(caps & 0xf0, 0x40);                                        // root port
    EXPECT_NE(caps & 0x100, 0);                                          // slot implemented
    EXPECT_NE(h.ecam_read<uint16_t>(port, express + 0x1a) & 0x40, 0);    // card present
    EXPECT_NE(h.ecam_read<uint16_t>(port, express + 0x12) & 0x2000, 0);  // link up

    EXPECT_EQ(h.ecam_read<uint32_t>({1, 0, 0}, 0), 0xffff'ffffu);  // not yet numbered
    program_port(h, port, 1);
    EXPECT_EQ(h.ecam_read<uint32_t>({1, 0, 0}, 0), 0x1111'1234u);
    EXPECT_EQ(h.legacy_read<uint32_t>({1, 0, 0}, 0), 0x1111'1234u);
    EXPECT_EQ(h.ecam_read<uint32_t>({1, 1, 0}, 0), 0xffff'ffffu);
    EXPECT_EQ(h.ecam_read<uint32_t>({2, 0, 0}, 0), 0xffff'ffffu);

    program_port(h, port, 5);  // renumbered
    EXPECT_EQ(h.ecam_read<uint32_t>({1, 0, 0}, 0), 0xffff'ffffu);
    EXPECT_EQ(h.ecam_read<uint32_t>({5, 0, 0}, 0), 0x1111'1234u);
}

TEST(PciHostBridge, DeviceBehindAPortDecodesOnlyInsideItsWindows) {
    PciHarness h;
    auto fn = three_bar_function();
    h.bridge.attach(fn, NewRootPort{});
    const PciAddr port{0, 1, 0}, dev{1, 0, 0};
    program_port(h, port, 1);
    h.ecam_write<uint32_t>(dev, kBar0, 0xc020'0000);
    h.ecam_write<uint32_t>(dev, kBar2, 0x0010'0000);
    h.ecam_write<uint32_t>(dev, kBar2 + 4, 0x40);
    h.ecam_write<uint32_t>(dev, kBar4, 0x2000);
    h.ecam_write<uint16_t>(dev, reg::kCommand, command::kMemorySpace | command::kIoSpace);
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc020'0004), 0xffff'ffffu);  // the port forwards nothing

    h.ecam_write<uint32_t>(port, reg::kMemoryBase, 0xc020'c020);  // 0xc0200000-0xc02fffff
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc020'0004), 0xffff'ffffu);  // port memory decode off
    h.ecam_write<uint16_t>(port, reg::kCommand, command::kMemorySpace);
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc020'0004), 0x4u);
    EXPECT_EQ(h.mmio_read<uint32_t>(0x40'0010'0000), 0xffff'ffffu);  // 64-bit BAR: no window

    // 0x40'0000'0000-0x40'001f'ffff
    h.ecam_write<uint32_t>(port, reg::kPrefetchableBase, 0x0010'0000);
    h.ecam_write<uint32_t>(port, reg::kPrefetchableBaseUpper, 0x40);
    h.ecam_write<uint32_t>(port, reg::kPrefetchableLimitUpper, 0x40);
    EXPECT_EQ(h.mmio_read<uint32_t>(0x40'0010'0008), 0x8u);

    h.ecam_write<uint32_t>(port, reg::kMemoryBase, 0xc030'c030);  // moved past the BAR
    EXPECT_EQ(h.mmio_read<uint32_t>(0xc020'0004), 0xffff'ffffu);
    EXPECT_EQ(fn->mapped.back(), std::pair(uint8_t{0}, std::optional<uint64_t>()));

    uint8_t b;
    EXPECT_FALSE(h.pio.read(PioPort(0x2000), {&b, 1}));
    h.ecam_write<uint16_t>(port, reg::kIoBase, 0x2020);  // 0x2000-0x2fff
    EXPECT_FALSE(h.pio.read(PioPort(0x2000), {&b, 1}));  // port I/O decode off
    h.ecam_write<uint16_t>(port, reg::kCommand, command::kMemorySpace | command::kIoSpace);
    EXPECT_TRUE(h.pio.read(PioPort(0x2000), {&b, 1}));
}

TEST(PciHostBridge, SixtyFourRootPortsEachWithADevice) {
    PciHarness h;
    for (int i = 0; i < 64; ++i) {
        const RootBusAddress at = h.bridge.attach(three_bar_function(), NewRootPort{});
        EXPECT_EQ(at.device, 1 + i / 8);
        EXPECT_EQ(at.function, i % 8);
    }
    EXPECT_EQ(h.bridge.attach(three_bar_function(), RootBusSlot{}).device, 9);

    // Enumerate as Linux does: function 0 first, the others only in multi-function slots.
    uint8_t next_bus = 1;
    std::set<uint8_t> buses;
    for (uint8_t d = 0; d < 32; ++d) {
        for (uint8_t f = 0; f < 8; ++f) {
            const PciAddr a{0, d, f};
            if (h.ecam_read<uint16_t>(a, 0) == 0xffff) continue;
            const auto header = h.ecam_read<uint8_t>(a, reg::kHeaderType);
            if ((header & 0x7f) == kHeaderTypeBridge) {
                program_port(h, a, next_bus);
                EXPECT_EQ(h.legacy_read<uint16_t>({next_bus, 0, 0}, 2), 0x1111);
                buses.insert(next_bus++);
            }
            if (f == 0 && !(header & kHeaderTypeMultiFunction)) break;
        }
    }
    EXPECT_EQ(buses.size(), 64u);
    EXPECT_EQ(h.ecam_read<uint8_t>({0, 1, 0}, reg::kHeaderType), 0x81);
    EXPECT_EQ(h.ecam_read<uint8_t>({0, 1, 3}, reg::kHeaderType), 0x81);
    EXPECT_EQ(h.ecam_read<uint8_t>({0, 9, 0}, reg::kHeaderType), 0x00);  // single function
}

TEST(PciHostBridge, EmptyRootPortsShareSlotsWithTheOthersAndShowNoCard) {
    PciHarness h;
    h.bridge.attach(three_bar_function(), NewRootPort{});
    const RootBusAddress empty = h.bridge.add_empty_root_port();
    EXPECT_EQ(empty.device, 1);
    EXPECT_EQ(empty.function, 1);
    EXPECT_EQ(h.bridge.attach(three_bar_function(), NewRootPort{}).function, 2);
    const PciAddr port{0, 1, 1};
    EXPECT_EQ(h.ecam_read<uint8_t>(port, reg::kHeaderType) & 0x7f, kHeaderTypeBridge);
    program_port(h, port, 5);
    EXPECT_EQ(h.ecam_read<uint16_t>({5, 0, 0}, 0), 0xffff);  // nothing behind it
    for (int i = 3; i < 248; ++i) h.bridge.add_empty_root_port();
    EXPECT_THROW(h.bridge.add_empty_root_port(), std::runtime_error);
}

TEST(PciHostBridge, TakenOrMissingPlacementsThrow) {
    PciHarness h;
    EXPECT_THROW(h.bridge.attach(three_bar_function(), RootBusSlot{0, 0}), std::invalid_argument);
    EXPECT_THROW(h.bridge.attach(three_bar_function(), RootBusSlot{32, 0}), std::runtime_error);
    for (int i = 1; i < 32; ++i) h.bridge.attach(three_bar_function(), RootBusSlot{});
    EXPECT_THROW(h.bridge.attach(three_bar_function(), RootBusSlot{}), std::runtime_error);
    EXPECT_THROW(h.bridge.attach(three_bar_function(), NewRootPort{}), std::runtime_error);
}

// vmm checks the disk counts with fits_on_root_bus before building anything: it must agree
// with what attach() accepts, whatever the order of the two kinds.
TEST(PciHostBridge, FitsOnRootBusAgreesWithAttach) {
    EXPECT_TRUE(fits_on_root_bus(31, 0));
    EXPECT_TRUE(fits_on_root_bus(0, 248));
    EXPECT_FALSE(fits_on_root_bus(32, 0));
    EXPECT_FALSE(fits_on_root_bus(0, 249));
    EXPECT_FALSE(fits_on_root_bus(31, 1));
    EXPECT_FALSE(fits_on_root_bus(~0u, ~0u));
    for (const auto& [slots, ports] : {std::pair{30u, 8u}, {30u, 9u}, {20u, 88u}, {20u, 89u}}) {
        for (const bool ports_first : {false, true}) {
            PciHarness h;
            unsigned attached = 0;
            try {
                for (unsigned i = 0; i < slots + ports; ++i, ++attached) {
                    const bool port = ports_first ? i < ports : i >= slots;
                    if (port)
                        h.bridge.attach(three_bar_function(), NewRootPort{});
                    else
                        h.bridge.attach(three_bar_function(), RootBusSlot{});
                }
            } catch (const std::runtime_error&) {
            }
            EXPECT_EQ(attached == slots + ports, fits_on_root_bus(slots, ports))
                << slots << " slot functions, " << ports << " root ports";
        }
    }
}

TEST(PciHostBridge, LayoutIsValidated) {
    MmioSpace mmio;
    PioSpace pio;
    testing::FakePlatform platform;
    auto layout = testing::test_layout();
    layout.io = {0xf000, 0x2000};  // past port 0xffff
    EXPECT_THROW((PciHostBridge{layout, mmio, pio, platform}), std::invalid_argument);
    layout = testing::test_layout();
    layout.ecam_base = GuestAddr(0xe008'0000);  // not 1 MiB aligned
    EXPECT_THROW((PciHostBridge{layout, mmio, pio, platform}), std::invalid_argument);
}

}  // namespace
}  // namespace mvmm::devices::pci
