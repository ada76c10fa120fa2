#include "devices/pci/msix.h"

#include <gtest/gtest.h>

#include "devices/pci/fake_platform.h"

namespace mvmm::devices::pci {
namespace {

class MsixTest : public ::testing::Test {
  protected:
    MsixTest() {
        msix.add_capability(config, 2, 0x4000, 0x5000);
        cap = config.get<uint8_t>(reg::kCapabilities);
    }

    void write_control(uint16_t control) {
        config.write(cap + 2, {reinterpret_cast<const uint8_t*>(&control), 2});
        msix.config_written(config);
    }
    void write_entry(uint16_t vector, uint64_t address, uint32_t data, uint32_t control) {
        const uint32_t entry[4] = {uint32_t(address), uint32_t(address >> 32), data, control};
        // Linux writes an entry a dword at a time, the vector control last.
        for (int i = 0; i < 4; ++i)
            msix.write_table(vector * 16 + i * 4, {reinterpret_cast<const uint8_t*>(&entry[i]), 4});
    }
    void set_mask(uint16_t vector, bool masked) {
        const uint32_t control = masked;
        msix.write_table(vector * 16 + 12, {reinterpret_cast<const uint8_t*>(&control), 4});
    }
    uint64_t pba() {
        uint64_t v;
        msix.read_pba(0, {reinterpret_cast<uint8_t*>(&v), 8});
        return v;
    }
    const testing::FakePlatform::Vector& vector(unsigned i) { return *platform.vectors.at(i); }

    static constexpr uint16_t kEnable = 0x8000, kFunctionMask = 0x4000;
    testing::FakePlatform platform;
    MsixTable msix{platform, 3};
    ConfigSpace config = ConfigSpace::endpoint({});
    uint16_t cap = 0;
};

TEST_F(MsixTest, CapabilityDescribesTableAndPba) {
    EXPECT_EQ(platform.vectors.size(), 3u);
    EXPECT_EQ(config.get<uint8_t>(cap), 0x11);
    EXPECT_EQ(config.get<uint16_t>(cap + 2), 2);  // table size - 1
    EXPECT_EQ(config.get<uint32_t>(cap + 4), 0x4002u);
    EXPECT_EQ(config.get<uint32_t>(cap + 8), 0x5002u);
    write_control(0xffff);
    EXPECT_EQ(config.get<uint16_t>(cap + 2), 0xc002);  // only enable and mask are writable
    EXPECT_EQ(msix.table_bytes(), 48u);
    EXPECT_EQ(msix.pba_bytes(), 8u);
    EXPECT_THROW((MsixTable{platform, 0}), std::invalid_argument);
    EXPECT_THROW((MsixTable{platform, 2049}), std::invalid_argument);
}

TEST_F(MsixTest, TableReadsBackWhatWasWrittenWithReservedBitsClear) {
    write_entry(1, 0xfee0'1000, 0x4041, 0xffff'ffff);
    uint32_t entry[4];
    msix.read_table(16, {reinterpret_cast<uint8_t*>(entry), 16});
    EXPECT_EQ(entry[0], 0xfee0'1000u);
    EXPECT_EQ(entry[1], 0u);
    EXPECT_EQ(entry[2], 0x4041u);
    EXPECT_EQ(entry[3], 1u);
    uint32_t vector0_control;
    msix.read_table(12, {reinterpret_cast<uint8_t*>(&vector0_control), 4});
    EXPECT_EQ(vector0_control, 1u);  // vectors start masked
    uint32_t past_end = 0xdead;
    msix.read_table(48, {reinterpret_cast<uint8_t*>(&past_end), 4});
    EXPECT_EQ(past_end, 0u);
    msix.write_table(48, {reinterpret_cast<const uint8_t*>(&past_end), 4});  // ignored
}

// Issue 18: an empty write copied from null and walked entries up to offset + 0 - 1.
TEST_F(MsixTest, EmptyTableWriteChangesNothing) {
    write_control(kEnable);
    for (uint64_t offset : {0ull, 12ull, 16ull, 47ull, 48ull})
        msix.write_table(offset, std::span<const uint8_t>{});
    uint32_t control;
    msix.read_table(12, {reinterpret_cast<uint8_t*>(&control), 4});
    EXPECT_EQ(control, 1u);
    EXPECT_EQ(vector(0).routes, 0u);
}

TEST_F(MsixTest, NothingFiresWhileMsixIsDisabled) {
    write_entry(0, 0xfee0'0000, 0x30, 0);
    msix.notify(0);
    EXPECT_EQ(vector(0).triggers, 0u);
    EXPECT_EQ(vector(0).routes, 0u);
    EXPECT_EQ(pba(), 0u);
}

TEST_F(MsixTest, UnmaskedVectorIsRoutedAndFires) {
    write_control(kEnable);
    write_entry(2, 0xfee0'2000, 0x41, 0);
    ASSERT_TRUE(vector(2).message.has_value());
    EXPECT_EQ(*vector(2).message, (MsiMessage{0xfee0'2000, 0x41}));
    msix.notify(2);
    msix.notify(2);
    EXPECT_EQ(vector(2).triggers, 2u);
    EXPECT_EQ(vector(2).routes, 1u);
    EXPECT_EQ(vector(0).triggers, 0u);
    msix.notify(3);  // past the table
}

TEST_F(MsixTest, MaskedVectorSetsPendingAndFiresOnUnmask) {
    write_control(kEnable);
    write_entry(1, 0xfee0'0000, 0x51, 1);
    msix.notify(1);
    EXPECT_EQ(vector(1).triggers, 0u);
    EXPECT_EQ(pba(), 0b010u);
    msix.notify(1);  // still one pending message
    set_mask(1, false);
    EXPECT_EQ(vector(1).triggers, 1u);
    EXPECT_EQ(*vector(1).message, (MsiMessage{0xfee0'0000, 0x51}));
    EXPECT_EQ(pba(), 0u);
}

TEST_F(MsixTest, FunctionMaskHoldsEveryVector) {
    write_control(kEnable | kFunctionMask);
    write_entry(0, 0xfee0'0000, 0x60, 0);
    write_entry(2, 0xfee0'0000, 0x62, 0);
    msix.notify(0);
    msix.notify(2);
    EXPECT_EQ(pba(), 0b101u);
    EXPECT_EQ(vector(0).routes, 0u);
    write_control(kEnable);
    EXPECT_EQ(vector(0).triggers, 1u);
    EXPECT_EQ(vector(2).triggers, 1u);
    EXPECT_EQ(pba(), 0u);
}

TEST_F(MsixTest, NewMessageIsRoutedBeforeTheNextInterrupt) {
    write_control(kEnable);
    write_entry(0, 0xfee0'0000, 0x30, 0);
    set_mask(0, true);
    write_entry(0, 0xfee0'3000, 0x31, 0);  // moved to another CPU, then unmasked
    EXPECT_EQ(vector(0).routes, 2u);
    EXPECT_EQ(*vector(0).message, (MsiMessage{0xfee0'3000, 0x31}));
    set_mask(0, true);
    set_mask(0, false);
    EXPECT_EQ(vector(0).routes, 2u);  // same message: no new route
}

}  // namespace
}  // namespace mvmm::devices::pci
