#include "devices/bus/address_space.h"

#include <gtest/gtest.h>

#include <array>
#include <memory>

namespace mvmm {
namespace {

// Counts the accesses that reach it.
class CountingHandler : public IoHandler {
  public:
    void read(uint64_t, std::span<uint8_t> data) override {
        ++reads;
        std::ranges::fill(data, 0x5a);
    }
    void write(uint64_t, std::span<const uint8_t>) override { ++writes; }
    unsigned reads = 0;
    unsigned writes = 0;
};

TEST(AddressSpaceTest, DispatchesAccessesInsideARegion) {
    MmioSpace mmio;
    auto handler = std::make_shared<CountingHandler>();
    mmio.add(GuestAddr(0x1000), 0x100, handler, "dev");
    std::array<uint8_t, 4> bytes{};
    EXPECT_TRUE(mmio.read(GuestAddr(0x10fc), bytes));
    EXPECT_EQ(bytes[0], 0x5a);
    EXPECT_TRUE(mmio.write(GuestAddr(0x1000), bytes));
    EXPECT_FALSE(mmio.write(GuestAddr(0x10fe), bytes));  // runs past the end
    EXPECT_EQ(handler->reads, 1u);
    EXPECT_EQ(handler->writes, 1u);
}

// An empty access is no bus cycle: no device sees it, wherever it points (issue 18: the MSI-X
// table computed offset + n - 1 from one and overflowed the heap).
TEST(AddressSpaceTest, EmptyAccessesReachNoDevice) {
    MmioSpace mmio;
    PioSpace pio;
    auto handler = std::make_shared<CountingHandler>();
    mmio.add(GuestAddr(0x1000), 0x100, handler, "mmio dev");
    pio.add(PioPort(0x3f8), 8, handler, "pio dev");
    for (uint64_t addr : {0x1000ull, 0x1080ull, 0x10ffull}) {
        EXPECT_FALSE(mmio.read(GuestAddr(addr), {}));
        EXPECT_FALSE(mmio.write(GuestAddr(addr), {}));
    }
    EXPECT_FALSE(pio.read(PioPort(0x3f8), {}));
    EXPECT_FALSE(pio.write(PioPort(0x3ff), {}));
    EXPECT_EQ(handler->reads, 0u);
    EXPECT_EQ(handler->writes, 0u);
}

}  // namespace
}  // namespace mvmm
