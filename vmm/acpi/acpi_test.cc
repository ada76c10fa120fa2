#include "vmm/acpi/tables.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "vmm/acpi/aml.h"

namespace mvmm::acpi {
namespace {

MachineInfo machine(unsigned cpus) {
    return {cpus, GuestAddr(0xfec00000), GuestAddr(0xfee00000),
            PciHostInfo{GuestAddr(0xe0000000), 255, 0x1000, 0xffff, GuestAddr(0xc0000000),
                        GuestAddr(0xdfffffff), GuestAddr(0x4000000000), GuestAddr(0x4fffffffff)}};
}

uint32_t le32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint64_t le64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}
uint8_t sum(const uint8_t* p, size_t n) {
    uint8_t s = 0;
    while (n--) s = uint8_t(s + *p++);
    return s;
}

// Follows RSDP -> XSDT -> tables, checking checksums on the way; returns signature -> offset.
std::map<std::string, size_t> walk(const Tables& t) {
    const uint8_t* b = t.bytes.data();
    auto offset_of = [&](uint64_t addr) { return size_t(addr - t.base.value()); };
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b), 8), "RSD PTR ");
    EXPECT_EQ(sum(b, 20), 0) << "RSDP checksum";
    EXPECT_EQ(sum(b, 36), 0) << "RSDP extended checksum";
    std::map<std::string, size_t> found;
    size_t xsdt = offset_of(le64(b + 24));
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(b + xsdt), 4), "XSDT");
    uint32_t xsdt_len = le32(b + xsdt + 4);
    EXPECT_EQ(sum(b + xsdt, xsdt_len), 0) << "XSDT checksum";
    for (size_t e = xsdt + 36; e < xsdt + xsdt_len; e += 8) {
        size_t off = offset_of(le64(b + e));
        std::string sig(reinterpret_cast<const char*>(b + off), 4);
        uint32_t len = le32(b + off + 4);
        EXPECT_LE(off + len, t.bytes.size()) << sig;
        EXPECT_EQ(sum(b + off, len), 0) << sig << " checksum";
        EXPECT_EQ(off % 16, 0u) << sig << " alignment";
        found[sig] = off;
    }
    return found;
}

TEST(AcpiTables, ChecksumsAndLinksAreValid) {
    auto t = build_tables(machine(4), GuestAddr(0xe0000));
    auto found = walk(t);
    ASSERT_TRUE(found.count("FACP"));
    ASSERT_TRUE(found.count("APIC"));
    ASSERT_TRUE(found.count("MCFG"));
    const uint8_t* fadt = t.bytes.data() + found["FACP"];
    EXPECT_EQ(le32(fadt + 4), 276u);
    size_t dsdt = size_t(le64(fadt + 140) - 0xe0000);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.bytes.data() + dsdt), 4), "DSDT");
    EXPECT_EQ(sum(t.bytes.data() + dsdt, le32(t.bytes.data() + dsdt + 4)), 0);
    EXPECT_EQ(le32(fadt + 64), kPm1ControlPort);
    EXPECT_EQ(fadt[128], kResetValue);
}

TEST(AcpiTables, TheHostBridgeGrantsNativeHotplugThroughOsc) {
    auto t = build_tables(machine(1), GuestAddr(0xe0000));
    const uint8_t* fadt = t.bytes.data() + walk(t)["FACP"];
    const auto dsdt = t.bytes.begin() + static_cast<std::ptrdiff_t>(le64(fadt + 140) - 0xe0000);
    const auto end = dsdt + le32(&*dsdt + 4);
    const auto pci0 = std::search(dsdt, end, std::begin("PCI0"), std::end("PCI0") - 1);
    const aml::Bytes osc = aml::method("_OSC", 4, {aml::return_value(aml::arg(3))});
    const auto at = std::search(dsdt, end, osc.begin(), osc.end());
    EXPECT_NE(at, end);
    EXPECT_LT(pci0, at);  // inside the host bridge's device, which comes after COM1
}

TEST(AcpiTables, MadtListsEveryCpuAndTheIoapic) {
    auto t = build_tables(machine(3), GuestAddr(0xe0000));
    auto found = walk(t);
    const uint8_t* madt = t.bytes.data() + found["APIC"];
    uint32_t len = le32(madt + 4);
    int cpus = 0, ioapics = 0;
    for (size_t off = 44; off < len; off += madt[off + 1]) {
        ASSERT_GT(madt[off + 1], 0);
        if (madt[off] == 0) {
            EXPECT_EQ(madt[off + 3], cpus) << "APIC ID";
            ++cpus;
        }
        if (madt[off] == 1) {
            ++ioapics;
            EXPECT_EQ(le32(madt + off + 4), 0xfec00000u);
        }
    }
    EXPECT_EQ(cpus, 3);
    EXPECT_EQ(ioapics, 1);
}

TEST(AcpiTables, McfgDescribesEcam) {
    auto t = build_tables(machine(1), GuestAddr(0xe0000));
    auto found = walk(t);
    const uint8_t* mcfg = t.bytes.data() + found["MCFG"];
    EXPECT_EQ(le64(mcfg + 44), 0xe0000000u);
    EXPECT_EQ(mcfg[54], 0);
    EXPECT_EQ(mcfg[55], 255);
}

TEST(Aml, EncodesIntegersAndNames) {
    EXPECT_EQ(aml::integer(0), aml::Bytes{0x00});
    EXPECT_EQ(aml::integer(1), aml::Bytes{0x01});
    EXPECT_EQ(aml::integer(0x12), (aml::Bytes{0x0a, 0x12}));
    EXPECT_EQ(aml::integer(0x1234), (aml::Bytes{0x0b, 0x34, 0x12}));
    EXPECT_EQ(aml::integer(0x12345678), (aml::Bytes{0x0c, 0x78, 0x56, 0x34, 0x12}));
    EXPECT_EQ(aml::eisa_id("PNP0A03"), (aml::Bytes{0x0c, 0x41, 0xd0, 0x0a, 0x03}));
    EXPECT_EQ(aml::name("_UID", aml::integer(0)), (aml::Bytes{0x08, '_', 'U', 'I', 'D', 0x00}));
}

TEST(Aml, OscGrantsWhatTheOsAsksFor) {
    // Method(_OSC, 4, NotSerialized) { Return (Arg3) }
    EXPECT_EQ(aml::method("_OSC", 4, {aml::return_value(aml::arg(3))}),
              (aml::Bytes{0x14, 0x08, '_', 'O', 'S', 'C', 0x04, 0xa4, 0x6b}));
    EXPECT_THROW(aml::arg(7), std::invalid_argument);
}

TEST(Aml, PackageLengthsUseTheLongFormWhenNeeded) {
    auto small = aml::buffer(aml::Bytes(10));
    EXPECT_EQ(small[1], 1 + 2 + 10);  // pkglength, BytePrefix size, data
    auto big = aml::buffer(aml::Bytes(100));
    // 1 lead byte + 1 extra: length = 2 + 2 + 100 = 104 = 0x68
    EXPECT_EQ(big[1] >> 6, 1);
    EXPECT_EQ((big[1] & 0xf) | (big[2] << 4), 104);
}

}  // namespace
}  // namespace mvmm::acpi
