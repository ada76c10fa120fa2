// An address space's statistics: rebuilds and their time, accesses per region, unclaimed ones.
#include <gtest/gtest.h>

#include <algorithm>

#include "devices/bus/address_space.h"

namespace mvmm {
namespace {

class NullDevice : public IoHandler {
  public:
    void read(uint64_t, std::span<uint8_t> data) override { std::ranges::fill(data, 0); }
    void write(uint64_t, std::span<const uint8_t>) override {}
};

uint64_t accesses(const AddressSpaceStats& stats, const std::string& name) {
    auto it = std::ranges::find(stats.by_region, name, &AddressSpaceStats::RegionAccesses::name);
    return it == stats.by_region.end() ? ~uint64_t{0} : it->accesses;
}

TEST(AddressSpaceStats, CountsRebuildsAndTheirTime) {
    PioSpace pio;
    EXPECT_EQ(pio.stats().rebuilds, 0u);
    auto id = pio.add(PioPort(0x3f8), 8, std::make_shared<NullDevice>(), "com1");
    pio.update(id, PioPort(0x2f8), true);
    pio.update(id, PioPort(0x2f8), true);  // no change: no new view
    const auto stats = pio.stats();
    EXPECT_EQ(stats.rebuilds, 2u);
    EXPECT_EQ(stats.rebuilds, pio.generation());
    EXPECT_GT(stats.rebuild_time.count(), 0);
}

TEST(AddressSpaceStats, CountsAccessesPerRegionAndUnclaimedOnes) {
    MmioSpace mmio;
    uint8_t buf[4];
    mmio.add(GuestAddr(0x1000), 0x1000, std::make_shared<NullDevice>(), "low");
    mmio.add(GuestAddr(0x1800), 0x100, std::make_shared<NullDevice>(), "shadow");
    EXPECT_TRUE(mmio.read(GuestAddr(0x1000), buf));
    EXPECT_TRUE(mmio.write(GuestAddr(0x1ffc), buf));  // the part of "low" above "shadow"
    EXPECT_TRUE(mmio.read(GuestAddr(0x1810), buf));
    EXPECT_FALSE(mmio.read(GuestAddr(0x9000), buf));
    EXPECT_FALSE(mmio.write(GuestAddr(0x1ffe), buf));  // runs past the end of "low"
    const auto stats = mmio.stats();
    EXPECT_EQ(accesses(stats, "low"), 2u);
    EXPECT_EQ(accesses(stats, "shadow"), 1u);
    EXPECT_EQ(stats.unclaimed, 2u);
}

TEST(AddressSpaceStats, AMovedRegionKeepsItsCount) {
    MmioSpace mmio;
    uint8_t buf[1];
    auto id = mmio.add(GuestAddr(0x1000), 0x100, std::make_shared<NullDevice>(), "bar0");
    EXPECT_TRUE(mmio.read(GuestAddr(0x1000), buf));
    mmio.update(id, GuestAddr(0x8000), false);
    EXPECT_FALSE(mmio.read(GuestAddr(0x8000), buf));  // decoding off
    mmio.update(id, GuestAddr(0x8000), true);
    EXPECT_TRUE(mmio.read(GuestAddr(0x8000), buf));
    EXPECT_EQ(accesses(mmio.stats(), "bar0"), 2u);
}

}  // namespace
}  // namespace mvmm
