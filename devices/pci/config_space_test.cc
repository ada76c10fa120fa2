#include "devices/pci/config_space.h"

#include <gtest/gtest.h>

namespace mvmm::devices::pci {
namespace {

constexpr Identity kId{.vendor_id = 0x1234,
                       .device_id = 0x5678,
                       .revision = 3,
                       .class_code = 0x010802,
                       .subsystem_vendor_id = 0x1af4,
                       .subsystem_id = 0x1100};

template <class T>
T guest_read(const ConfigSpace& c, uint16_t offset) {
    T v;
    c.read(offset, {reinterpret_cast<uint8_t*>(&v), sizeof v});
    return v;
}
template <class T>
void guest_write(ConfigSpace& c, uint16_t offset, T v) {
    c.write(offset, {reinterpret_cast<const uint8_t*>(&v), sizeof v});
}

TEST(ConfigSpace, EndpointHeaderIsReadOnlyWhereTheSpecSaysSo) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kVendorId), 0x5678'1234u);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kRevision), 0x0108'0203u);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kSubsystemVendorId), 0x1100'1af4u);
    EXPECT_EQ(guest_read<uint8_t>(c, reg::kHeaderType), 0);

    guest_write<uint32_t>(c, reg::kVendorId, 0);
    guest_write<uint8_t>(c, reg::kClassCode + 2, 0xff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kVendorId), 0x5678'1234u);
    EXPECT_EQ(guest_read<uint8_t>(c, reg::kClassCode + 2), 0x01);

    guest_write<uint16_t>(c, reg::kCommand, 0xffff);
    EXPECT_EQ(guest_read<uint16_t>(c, reg::kCommand), 0x0547);
    guest_write<uint8_t>(c, reg::kInterruptLine, 11);
    EXPECT_EQ(guest_read<uint8_t>(c, reg::kInterruptLine), 11);
    guest_write<uint8_t>(c, reg::kInterruptPin, 1);
    EXPECT_EQ(guest_read<uint8_t>(c, reg::kInterruptPin), 0);
}

TEST(ConfigSpace, StatusErrorBitsClearOnlyWhereOneIsWritten) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    c.add_capability(0x05, 8);
    c.set(reg::kStatus, uint16_t(c.get<uint16_t>(reg::kStatus) | 0x8000 | 0x2000));
    guest_write<uint16_t>(c, reg::kStatus, 0x0000);
    EXPECT_EQ(guest_read<uint16_t>(c, reg::kStatus), 0xa010);
    guest_write<uint16_t>(c, reg::kStatus, 0x2010);  // capability bit is read-only
    EXPECT_EQ(guest_read<uint16_t>(c, reg::kStatus), 0x8010);
    // A dword write to the command register clears status bits with its upper half.
    guest_write<uint32_t>(c, reg::kCommand, 0x8000'0002);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kCommand), 0x0010'0002u);
}

TEST(ConfigSpace, CapabilitiesAreLinkedInOrder) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    EXPECT_EQ(guest_read<uint16_t>(c, reg::kStatus) & kStatusCapabilityList, 0);
    const uint16_t first = c.add_capability(0x11, 12);
    const uint16_t second = c.add_capability(0x09, 17);
    const uint16_t third = c.add_capability(0x10, 0x3c);
    EXPECT_EQ(first, 0x40);
    EXPECT_EQ(second, 0x4c);
    EXPECT_EQ(third, 0x60);  // 4-byte aligned after 0x4c + 17
    EXPECT_EQ(guest_read<uint8_t>(c, reg::kCapabilities), 0x40);
    EXPECT_EQ(guest_read<uint16_t>(c, first), 0x4c11);
    EXPECT_EQ(guest_read<uint16_t>(c, second), 0x6009);
    EXPECT_EQ(guest_read<uint16_t>(c, third), 0x0010);
    EXPECT_NE(guest_read<uint16_t>(c, reg::kStatus) & kStatusCapabilityList, 0);
    guest_write<uint8_t>(c, first + 1, 0x80);  // the chain is read-only
    EXPECT_EQ(guest_read<uint8_t>(c, first + 1), 0x4c);
    EXPECT_THROW(c.add_capability(0x05, 0x80), std::length_error);
}

TEST(ConfigSpace, ExtendedCapabilitiesStartAt0x100) {
    ConfigSpace c = ConfigSpace::bridge(kId);
    EXPECT_EQ(c.add_extended_capability(0x000d, 1, 8), 0x100);
    EXPECT_EQ(c.add_extended_capability(0x0001, 2, 0x48), 0x108);
    EXPECT_EQ(guest_read<uint32_t>(c, 0x100), 0x1081'000du);  // next 0x108, v1, ACS
    EXPECT_EQ(guest_read<uint32_t>(c, 0x108), 0x0002'0001u);  // end of list, v2, AER
    EXPECT_THROW(c.add_extended_capability(0x0003, 1, 0x1000), std::length_error);
}

TEST(ConfigSpace, Memory32BarReportsItsSizeWhenAllOnesAreWritten) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    c.add_bar({.index = 1, .kind = BarKind::Memory32, .size = 0x1000});
    const uint16_t bar1 = reg::kBar0 + 4;
    EXPECT_EQ(guest_read<uint32_t>(c, bar1), 0u);
    guest_write<uint32_t>(c, bar1, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, bar1), 0xffff'f000u);
    guest_write<uint32_t>(c, bar1, 0xc012'3456);
    EXPECT_EQ(guest_read<uint32_t>(c, bar1), 0xc012'3000u);
    // Neighbouring BARs that were not declared stay zero.
    guest_write<uint32_t>(c, reg::kBar0, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kBar0), 0u);
}

TEST(ConfigSpace, Memory64BarSizesAcrossBothDwords) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    c.add_bar({.index = 2, .kind = BarKind::Memory64, .size = 0x4000, .prefetchable = true});
    c.add_bar({.index = 4, .kind = BarKind::Memory64, .size = 8ull << 30});
    const uint16_t bar2 = reg::kBar0 + 8, bar4 = reg::kBar0 + 16;
    EXPECT_EQ(guest_read<uint32_t>(c, bar2), 0xcu);  // 64-bit, prefetchable
    guest_write<uint32_t>(c, bar2, 0xffff'ffff);
    guest_write<uint32_t>(c, bar2 + 4, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, bar2), 0xffff'c00cu);
    EXPECT_EQ(guest_read<uint32_t>(c, bar2 + 4), 0xffff'ffffu);

    guest_write<uint32_t>(c, bar4, 0xffff'ffff);
    guest_write<uint32_t>(c, bar4 + 4, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, bar4), 0x4u);  // 8 GiB: no low address bits
    EXPECT_EQ(guest_read<uint32_t>(c, bar4 + 4), 0xffff'fffeu);
    guest_write<uint64_t>(c, bar4, 0x0000'0042'0000'0000);
    EXPECT_EQ(guest_read<uint64_t>(c, bar4), 0x0000'0042'0000'0004u);
}

TEST(ConfigSpace, IoBarDecodesSixteenBits) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    c.add_bar({.index = 0, .kind = BarKind::Io, .size = 0x20});
    guest_write<uint32_t>(c, reg::kBar0, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kBar0), 0x0000'ffe1u);
    guest_write<uint32_t>(c, reg::kBar0, 0x1234);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kBar0), 0x1221u);
}

TEST(ConfigSpace, BadBarsAreRejected) {
    ConfigSpace c = ConfigSpace::endpoint(kId);
    EXPECT_THROW(c.add_bar({.index = 0, .kind = BarKind::Memory32, .size = 0x3000}),
                 std::invalid_argument);
    EXPECT_THROW(c.add_bar({.index = 0, .kind = BarKind::Memory32, .size = 8}),
                 std::invalid_argument);
    EXPECT_THROW(c.add_bar({.index = 5, .kind = BarKind::Memory64, .size = 0x1000}),
                 std::invalid_argument);
    EXPECT_THROW(c.add_bar({.index = 6, .kind = BarKind::Io, .size = 4}), std::invalid_argument);
}

TEST(ConfigSpace, BridgeWindowsHaveTheirGranularity) {
    ConfigSpace c = ConfigSpace::bridge(kId);
    EXPECT_EQ(guest_read<uint8_t>(c, reg::kHeaderType), kHeaderTypeBridge);
    guest_write<uint32_t>(c, reg::kPrimaryBus, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kPrimaryBus), 0x00ff'ffffu);  // no latency timer
    guest_write<uint16_t>(c, reg::kIoBase, 0xffff);
    EXPECT_EQ(guest_read<uint16_t>(c, reg::kIoBase), 0xf0f0);  // 16-bit I/O addressing
    guest_write<uint32_t>(c, reg::kMemoryBase, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kMemoryBase), 0xfff0'fff0u);
    guest_write<uint32_t>(c, reg::kPrefetchableBase, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kPrefetchableBase), 0xfff1'fff1u);  // 64-bit
    guest_write<uint32_t>(c, reg::kPrefetchableBaseUpper, 0xffff'ffff);
    EXPECT_EQ(guest_read<uint32_t>(c, reg::kPrefetchableBaseUpper), 0xffff'ffffu);
    guest_write<uint32_t>(c, 0x30, 0xffff'ffff);  // I/O upper 16 bits: not implemented
    EXPECT_EQ(guest_read<uint32_t>(c, 0x30), 0u);
    guest_write<uint32_t>(c, 0x38, 0xffff'ffff);  // no expansion ROM
    EXPECT_EQ(guest_read<uint32_t>(c, 0x38), 0u);
}

}  // namespace
}  // namespace mvmm::devices::pci
