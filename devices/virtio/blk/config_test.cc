#include "devices/virtio/blk/config.h"

#include <gtest/gtest.h>

namespace mvmm::devices::virtio::blk {
namespace {

TEST(DiskSerialTest, UsesTheSerialElseTheEndOfTheFileName) {
    DiskConfig config;
    config.path = "/var/lib/images/a-very-long-disk-name-0042.img";
    EXPECT_EQ(disk_serial(config), "g-disk-name-0042.img");
    config.path = "short.img";
    EXPECT_EQ(disk_serial(config), "short.img");
    config.path = "/x/b\x01\xff.img";
    EXPECT_EQ(disk_serial(config), "b__.img");
    config.serial = "given";
    EXPECT_EQ(disk_serial(config), "given");
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
