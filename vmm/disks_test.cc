#include "vmm/disks.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "devices/block/temp_image.h"
#include "devices/virtio/scsi/controller.h"

namespace mvmm {
namespace {

using devices::block::testing::TempImage;

void grow(const TempImage& image, uint64_t size) {
    ASSERT_EQ(::truncate(image.path().c_str(), static_cast<off_t>(size)), 0) << image.path();
}

uint64_t blk_capacity_sectors(const Disk& disk) {
    std::array<uint8_t, 8> bytes{};
    disk.device->read_config(0, bytes);  // virtio_blk_config.capacity
    uint64_t sectors;
    std::memcpy(&sectors, bytes.data(), sizeof sectors);
    return sectors;
}

uint64_t lun_blocks(const Disk& disk, uint16_t lun) {
    const auto& scsi = dynamic_cast<const devices::virtio::scsi::ScsiController&>(*disk.device);
    return scsi.target(0)->find(lun)->info().blocks;
}

TEST(OpenDisks, ResizeReachesEveryDiskOpenedFromThePath) {
    TempImage blk(8 * 512), lun(8 * 512), shared(8 * 512);
    DiskOptions options;
    options.scsi.push_back(parse_scsi_controller_option("id=c0"));
    add_disk_option("path=" + blk.path(), options);
    add_disk_option("path=" + lun.path() + ",controller=c0,lun=0", options);
    add_disk_option("path=" + shared.path() + ",controller=c0,lun=1,readonly=on,serial=a", options);
    add_disk_option("path=" + shared.path() + ",controller=c0,lun=2,readonly=on,serial=b", options);
    boost::asio::io_context io;
    const std::vector<Disk> disks = open_disks(options, io);
    ASSERT_EQ(disks.size(), 2u);

    grow(blk, 16 * 512);
    EXPECT_EQ(disks[1].resize(blk.path()), std::nullopt) << "the controller has no such LUN";
    EXPECT_EQ(disks[0].resize(blk.path()), 16u * 512);
    EXPECT_EQ(blk_capacity_sectors(disks[0]), 16u);

    grow(shared, 32 * 512);
    EXPECT_EQ(disks[0].resize(shared.path()), std::nullopt);
    EXPECT_EQ(disks[1].resize(shared.path()), 32u * 512);
    EXPECT_EQ(lun_blocks(disks[1], 1), 32u);
    EXPECT_EQ(lun_blocks(disks[1], 2), 32u);
    EXPECT_EQ(lun_blocks(disks[1], 0), 8u) << "another image";

    grow(lun, 8 * 512 + 100);
    EXPECT_THROW(disks[1].resize(lun.path()), std::runtime_error) << "not whole blocks";
    EXPECT_EQ(lun_blocks(disks[1], 0), 8u);
}

}  // namespace
}  // namespace mvmm
