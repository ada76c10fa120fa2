#include "devices/virtio/blk/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "devices/virtio/blk/io.h"
#include "devices/virtio/blk/test_image.h"

namespace mvmm::devices::virtio::blk {
namespace {

using ::testing::HasSubstr;
using testing::TempImage;

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

// Opening: each failure is a clear error for the user.
std::string open_error(const DiskConfig& config) {
    try {
        DiskImage image = DiskImage::open(config);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

DiskConfig config_for(std::string path, bool read_only = false) {
    DiskConfig config;
    config.path = std::move(path);
    config.read_only = read_only;
    return config;
}

TEST(DiskImageOpenTest, OpensAnImage) {
    TempImage file(8 * 512);
    DiskImage image = DiskImage::open(file.config());
    EXPECT_EQ(image.size(), 8u * 512);
    EXPECT_FALSE(image.read_only());
    EXPECT_EQ(image.path(), file.path());
}

TEST(DiskImageOpenTest, RefusesAMissingFile) {
    const auto error = open_error(config_for("/nonexistent/disk.img"));
    EXPECT_THAT(error, HasSubstr("/nonexistent/disk.img"));
    EXPECT_THAT(error, HasSubstr("No such file or directory"));
}

TEST(DiskImageOpenTest, RefusesADirectory) {
    EXPECT_THAT(open_error(config_for("/tmp")), HasSubstr("directory"));
    EXPECT_THAT(open_error(config_for("/tmp", true)), HasSubstr("is a directory"));
}

TEST(DiskImageOpenTest, RefusesACharacterDevice) {
    EXPECT_THAT(open_error(config_for("/dev/null")),
                HasSubstr("neither a regular file nor a block device"));
}

TEST(DiskImageOpenTest, RefusesASizeNotAMultipleOf512AndSaysWhatToDo) {
    TempImage file(1000);
    const auto error = open_error(file.config());
    EXPECT_THAT(error, HasSubstr("1000 bytes, not a multiple of 512"));
    EXPECT_THAT(error, HasSubstr("truncate -s %512 " + file.path()));
}

TEST(DiskImageOpenTest, SuggestsReadonlyForAReadOnlyFile) {
    if (::geteuid() == 0) GTEST_SKIP() << "root may write any file";
    TempImage file(512);
    ASSERT_EQ(::chmod(file.path().c_str(), 0444), 0);
    EXPECT_THAT(open_error(file.config()), HasSubstr("add readonly=on"));
    EXPECT_EQ(open_error(file.config(true)), "");
}

TEST(DiskImageOpenTest, RefusesAnImageInUse) {
    TempImage file(512);
    {
        DiskImage writer = DiskImage::open(file.config());
        EXPECT_THAT(open_error(file.config()), HasSubstr("in use"));
        EXPECT_THAT(open_error(file.config(true)), HasSubstr("in use"));
    }
    DiskImage reader = DiskImage::open(file.config(true));
    EXPECT_EQ(open_error(file.config(true)), "") << "read-only disks may share an image";
    EXPECT_THAT(open_error(file.config()), HasSubstr("in use"));
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
