#include "devices/virtio/scsi/responses.h"

#include <gtest/gtest.h>

#include "devices/virtio/scsi/big_endian.h"

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr LunInfo kLun{.blocks = 1 << 20};
constexpr LunInfo kReadOnly{.blocks = 1 << 20, .read_only = true};
const LunIdentity kIdentity{"disk-07", naa_designator("disk-07")};

uint64_t be(std::span<const uint8_t> bytes, size_t at, size_t n) {
    return load_be(bytes, at, n);
}
std::string text(std::span<const uint8_t> bytes, size_t at, size_t n) {
    return std::string(bytes.begin() + at, bytes.begin() + at + n);
}

TEST(Inquiry, StandardDataSaysSpc3DiskWithTaggedQueueing) {
    const auto data = inquiry_data(true);
    ASSERT_EQ(data.size(), 36u);
    EXPECT_EQ(data[0], 0x00) << "direct access, connected";
    EXPECT_EQ(data[2], 0x05) << "SPC-3: Linux scans with REPORT LUNS";
    EXPECT_EQ(data[3] & 0x0f, 2) << "response data format";
    EXPECT_EQ(data[4], 31) << "additional length";
    EXPECT_TRUE(data[7] & 0x02) << "CMDQUE";
    EXPECT_EQ(text(data, 8, 8), "MVMM    ");
    EXPECT_EQ(inquiry_data(false)[0], 0x7f) << "no device at this LUN";
    EXPECT_EQ(inquiry_data(false)[2], 0x05) << "the version still tells the guest to REPORT LUNS";
}

TEST(Vpd, EveryListedPageHasItsCodeAndLength) {
    const auto supported = vpd_page(0x00, kLun, kIdentity);
    EXPECT_EQ(be(supported, 2, 2), std::size(kVpdPages));
    for (size_t i = 0; i < std::size(kVpdPages); ++i) {
        EXPECT_EQ(supported[4 + i], kVpdPages[i]);
        const auto page = vpd_page(kVpdPages[i], kLun, kIdentity);
        EXPECT_EQ(page[1], kVpdPages[i]);
        EXPECT_EQ(be(page, 2, 2), page.size() - 4) << int(kVpdPages[i]);
    }
}

TEST(Vpd, SerialAndDesignatorsNameTheLunBySerial) {
    const auto serial = vpd_page(0x80, kLun, kIdentity);
    EXPECT_EQ(text(serial, 4, serial.size() - 4), "disk-07");
    const auto ids = vpd_page(0x83, kLun, kIdentity);
    ASSERT_EQ(ids.size(), 4u + 12 + 4 + 15);
    EXPECT_EQ(ids[4], 0x01);
    EXPECT_EQ(ids[5], 0x03) << "LU association, NAA";
    EXPECT_EQ(be(ids, 8, 8), kIdentity.naa);
    EXPECT_EQ(ids[16], 0x02) << "ASCII";
    EXPECT_EQ(ids[17], 0x01) << "T10 vendor ID";
    EXPECT_EQ(text(ids, 20, 15), "MVMM    disk-07");
}

TEST(Vpd, NaaDesignatorsAreStablePerSerialAndLocallyAssigned) {
    EXPECT_EQ(naa_designator("disk-07"), naa_designator("disk-07"));
    EXPECT_NE(naa_designator("disk-07"), naa_designator("disk-08"));
    EXPECT_EQ(naa_designator("x") >> 60, 3u);
}

TEST(Vpd, LimitsAndProvisioningFollowTheReadOnlyFlag) {
    const auto limits = vpd_page(0xb0, kLun, kIdentity);
    EXPECT_EQ(limits[4] & 1, 1) << "WSNZ";
    EXPECT_EQ(be(limits, 20, 4), kMaxUnmapBlocks);
    EXPECT_EQ(be(limits, 24, 4), kMaxUnmapDescriptors);
    EXPECT_EQ(be(limits, 36, 8), kMaxWriteSameBlocks);
    EXPECT_EQ(be(vpd_page(0xb0, kReadOnly, kIdentity), 20, 4), 0u) << "no UNMAP";
    EXPECT_EQ(be(vpd_page(0xb1, kLun, kIdentity), 4, 2), 1u) << "not rotating";
    const auto provisioning = vpd_page(0xb2, kLun, kIdentity);
    EXPECT_EQ(provisioning[5] & 0xe0, 0xe0) << "LBPU, LBPWS, LBPWS10";
    EXPECT_EQ(provisioning[6] & 7, 2) << "thin";
    EXPECT_EQ(vpd_page(0xb2, kReadOnly, kIdentity)[5], 0);
}

TEST(ModeSense, SixByteCachingPageWithABlockDescriptor) {
    const auto data = mode_sense_data({.page = mode_page::kCaching}, kLun);
    ASSERT_EQ(data.size(), 4u + 8 + 20);
    EXPECT_EQ(data[0], data.size() - 1) << "mode data length";
    EXPECT_EQ(data[2], 0x10) << "DPOFUA, not write-protected";
    EXPECT_EQ(data[3], 8) << "block descriptor length";
    EXPECT_EQ(be(data, 4, 4), kLun.blocks);
    EXPECT_EQ(be(data, 9, 3), 512u);
    EXPECT_EQ(data[12], 0x08);
    EXPECT_EQ(data[14] & 0x04, 0x04) << "WCE: the guest sends flushes";
}

TEST(ModeSense, TenByteAllPagesWithoutDescriptorAndWriteProtect) {
    const ModeSense request{.page = mode_page::kAllPages, .block_descriptor = false, .ten = true};
    const auto data = mode_sense_data(request, kReadOnly);
    ASSERT_EQ(data.size(), 8u + 20 + 12);
    EXPECT_EQ(be(data, 0, 2), data.size() - 2);
    EXPECT_EQ(data[3] & 0x80, 0x80) << "WP: Linux makes the disk read-only";
    EXPECT_EQ(be(data, 6, 2), 0u);
    EXPECT_EQ(data[8], 0x08);
    EXPECT_EQ(data[28], 0x0a);
}

TEST(ModeSense, OnlyTheWriteCacheIsChangeable) {
    const ModeSense request{.page = mode_page::kCaching, .control = PageControl::Changeable};
    const auto changeable = mode_sense_data(request, kLun);
    EXPECT_EQ(changeable[12 + 2], 0x04) << "WCE";
    EXPECT_TRUE(std::all_of(changeable.begin() + 12 + 3, changeable.end(),
                            [](uint8_t b) { return b == 0; }));
    LunInfo write_through = kLun;
    write_through.write_cache = false;
    EXPECT_EQ(mode_sense_data({.page = mode_page::kCaching}, write_through)[12 + 2], 0);
    EXPECT_EQ(mode_sense_data({.page = mode_page::kCaching, .control = PageControl::Default},
                              write_through)[12 + 2],
              0x04);
}

TEST(ReadCapacity, TenCapsAndSixteenTellsTheTruth) {
    const LunInfo big{.blocks = 1ull << 33};
    EXPECT_EQ(be(read_capacity_data(false, kLun), 0, 4), kLun.blocks - 1);
    EXPECT_EQ(be(read_capacity_data(false, kLun), 4, 4), 512u);
    EXPECT_EQ(be(read_capacity_data(false, big), 0, 4), 0xffff'ffffu) << "ask READ CAPACITY(16)";
    const auto sixteen = read_capacity_data(true, big);
    ASSERT_EQ(sixteen.size(), 32u);
    EXPECT_EQ(be(sixteen, 0, 8), big.blocks - 1);
    EXPECT_EQ(sixteen[14] & 0x80, 0x80) << "LBPME";
    EXPECT_EQ(read_capacity_data(true, kReadOnly)[14], 0);
}

TEST(ReportLuns, PeripheralBelow256FlatSpaceAbove) {
    const uint16_t luns[] = {0, 5, 255, 256, 16383};
    const auto data = report_luns_data(luns);
    ASSERT_EQ(data.size(), 8u + 5 * 8);
    EXPECT_EQ(be(data, 0, 4), 40u);
    EXPECT_EQ(be(data, 8, 8), 0u);
    EXPECT_EQ(be(data, 16, 8), 0x0005'0000'0000'0000u);
    EXPECT_EQ(be(data, 24, 8), 0x00ff'0000'0000'0000u);
    EXPECT_EQ(be(data, 32, 8), 0x4100'0000'0000'0000u);
    EXPECT_EQ(be(data, 40, 8), 0x7fff'0000'0000'0000u);
    EXPECT_EQ(report_luns_data({}).size(), 8u);
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi
