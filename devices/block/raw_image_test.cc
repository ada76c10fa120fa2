#include "devices/block/raw_image.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "devices/block/temp_image.h"

namespace mvmm::devices::block {
namespace {

using ::testing::HasSubstr;
using testing::TempImage;

using testing::filled;
using DiskIoTest = testing::ImageTest;

TEST_F(DiskIoTest, WritesAndReadsScatteredBuffers) {
    ASSERT_TRUE(image->write(512, scattered()));
    EXPECT_EQ(file.read(512, 1024), gathered());
    EXPECT_EQ(file.read(0, 512), filled(512, 0xaa)) << "nothing outside the range";
    EXPECT_EQ(file.read(1536, 512), filled(512, 0xaa));

    const auto on_disk = testing::pattern(1024, 7);
    file.write(4096, on_disk);
    auto into = scattered();
    ASSERT_TRUE(image->read(4096, into));
    EXPECT_EQ(gathered(), on_disk);
}

TEST_F(DiskIoTest, MovesMorePiecesThanOneSystemCallTakes) {
    const auto on_disk = testing::pattern(300 * 8, 3);
    file.write(0, on_disk);
    std::vector<uint8_t> into(on_disk.size());
    std::vector<GuestBuffers::Part> parts;
    for (size_t at = 0; at < into.size(); at += 8)
        parts.emplace_back(std::span(into).subspan(at, 8));
    ASSERT_TRUE(image->read(0, GuestBuffers(parts).slice(4, into.size() - 8)));
    EXPECT_TRUE(std::equal(into.begin() + 4, into.end() - 4, on_disk.begin()));
    EXPECT_EQ(into.front(), 0) << "nothing outside the slice";
    EXPECT_EQ(into.back(), 0);
}

TEST_F(DiskIoTest, ReadingPastAShrunkImageFails) {
    ASSERT_EQ(::truncate(file.path().c_str(), 1024), 0);
    auto into = scattered();
    auto result = image->read(512, into);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error(), std::errc::io_error);
}

TEST_F(DiskIoTest, Flushes) {
    EXPECT_TRUE(image->flush());
}

TEST_F(DiskIoTest, DiscardDeallocatesAndReadsZero) {
    struct stat before {};
    ASSERT_EQ(::stat(file.path().c_str(), &before), 0);
    ASSERT_TRUE(image->discard(8192, 16384));
    struct stat after {};
    ASSERT_EQ(::stat(file.path().c_str(), &after), 0);
    EXPECT_LT(after.st_blocks, before.st_blocks);
    EXPECT_EQ(after.st_size, before.st_size);
    EXPECT_EQ(file.read(8192, 16384), filled(16384, 0));
    EXPECT_EQ(file.read(8192 - 512, 512), filled(512, 0xaa));
}

TEST_F(DiskIoTest, WriteZeroesZeroesTheRangeWithOrWithoutUnmap) {
    ASSERT_TRUE(image->write_zeroes(1024, 2048, false));
    EXPECT_EQ(file.read(1024, 2048), filled(2048, 0));
    ASSERT_TRUE(image->write_zeroes(8192, 8192, true));
    EXPECT_EQ(file.read(8192, 8192), filled(8192, 0));
    EXPECT_EQ(file.read(512, 512), filled(512, 0xaa));
    EXPECT_EQ(file.read(3072, 512), filled(512, 0xaa));
}

TEST(DiskIoFallbackTest, WriteZeroesWritesZeroesWhereFallocateCannot) {
    // tmpfs has no FALLOC_FL_ZERO_RANGE.
    if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no /dev/shm";
    TempImage file(256 * 1024, 0x55, "/dev/shm");
    auto image = RawImage::open(file.path(), false);
    ASSERT_TRUE(image->write_zeroes(4096, 200 * 1024, false));
    EXPECT_EQ(file.read(4096, 200 * 1024), filled(200 * 1024, 0));
    EXPECT_EQ(file.read(0, 4096), filled(4096, 0x55));
    EXPECT_EQ(file.read(204 * 1024, 4096), filled(4096, 0x55));
}

TEST(DiskIoRepeatedTest, WriteRepeatedWritesAPatternOverARangeInMoreThanOneCall) {
    TempImage file(256 * 1024, 0xaa);
    auto image = RawImage::open(file.path(), false);
    std::vector<uint8_t> block = testing::pattern(512, 3);
    const GuestBuffers::Part pattern{std::span(block)};
    // 64 pieces per vectored write: 32 KiB a call; the last copy is cut short.
    constexpr uint64_t kLength = 100 * 1024 + 256;
    ASSERT_TRUE(image->write_repeated(512, kLength, pattern));
    for (uint64_t at = 0; at < kLength; at += 512) {
        const uint64_t n = std::min<uint64_t>(512, kLength - at);
        ASSERT_EQ(file.read(512 + at, n), std::vector<uint8_t>(block.begin(), block.begin() + n))
            << "copy at " << at;
    }
    EXPECT_EQ(file.read(0, 512), filled(512, 0xaa));
    EXPECT_EQ(file.read(512 + kLength, 256), filled(256, 0xaa));
    EXPECT_FALSE(image->write_repeated(0, 512, GuestBuffers::Part()));
}

TEST(DiskIoReadOnlyTest, AReadOnlyImageCannotBeWritten) {
    TempImage file(4096, 0x11);
    auto image = RawImage::open(file.path(), true);
    EXPECT_TRUE(image->read_only());
    std::vector<uint8_t> data(512, 0x22);
    const GuestBuffers::Part part[] = {GuestSlice(data)};
    EXPECT_FALSE(image->write(0, GuestBuffers(part))) << "opened O_RDONLY";
    EXPECT_EQ(file.read(0, 512), filled(512, 0x11));
}

// Opening: each failure is a clear error for the user.
std::string open_error(const std::string& path, bool read_only = false) {
    try {
        auto image = RawImage::open(path, read_only);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "";
}

TEST(DiskImageOpenTest, OpensAnImage) {
    TempImage file(8 * 512);
    auto image = RawImage::open(file.path(), false);
    EXPECT_EQ(image->size(), 8u * 512);
    EXPECT_FALSE(image->read_only());
    EXPECT_EQ(image->path(), file.path());
}

TEST(DiskImageOpenTest, RefusesAMissingFile) {
    const auto error = open_error("/nonexistent/disk.img");
    EXPECT_THAT(error, HasSubstr("/nonexistent/disk.img"));
    EXPECT_THAT(error, HasSubstr("No such file or directory"));
}

TEST(DiskImageOpenTest, RefusesADirectory) {
    EXPECT_THAT(open_error("/tmp"), HasSubstr("directory"));
    EXPECT_THAT(open_error("/tmp", true), HasSubstr("is a directory"));
}

TEST(DiskImageOpenTest, RefusesACharacterDevice) {
    EXPECT_THAT(open_error("/dev/null"), HasSubstr("neither a regular file nor a block device"));
}

TEST(DiskImageOpenTest, RefusesASizeNotAMultipleOf512AndSaysWhatToDo) {
    TempImage file(1000);
    const auto error = open_error(file.path());
    EXPECT_THAT(error, HasSubstr("1000 bytes, not a multiple of 512"));
    EXPECT_THAT(error, HasSubstr("truncate -s %512 " + file.path()));
}

TEST(DiskImageOpenTest, SuggestsReadonlyForAReadOnlyFile) {
    if (::geteuid() == 0) GTEST_SKIP() << "root may write any file";
    TempImage file(512);
    ASSERT_EQ(::chmod(file.path().c_str(), 0444), 0);
    EXPECT_THAT(open_error(file.path()), HasSubstr("add readonly=on"));
    EXPECT_EQ(open_error(file.path(), true), "");
}

TEST(DiskImageOpenTest, RefusesAnImageInUse) {
    TempImage file(512);
    {
        auto writer = RawImage::open(file.path(), false);
        EXPECT_THAT(open_error(file.path()), HasSubstr("in use"));
        EXPECT_THAT(open_error(file.path(), true), HasSubstr("in use"));
    }
    auto reader = RawImage::open(file.path(), true);
    EXPECT_EQ(open_error(file.path(), true), "") << "read-only disks may share an image";
    EXPECT_THAT(open_error(file.path()), HasSubstr("in use"));
}

}  // namespace
}  // namespace mvmm::devices::block
