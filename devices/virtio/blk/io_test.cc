#include "devices/virtio/blk/io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "devices/virtio/blk/test_image.h"

namespace mvmm::devices::virtio::blk {
namespace {

using testing::TempImage;

constexpr uint64_t kImageSize = 64 * 1024;

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
    std::vector<uint8_t> bytes(size);
    std::iota(bytes.begin(), bytes.end(), seed);
    return bytes;
}

std::vector<uint8_t> filled(size_t size, uint8_t value) {
    return std::vector<uint8_t>(size, value);
}

class DiskIoTest : public ::testing::Test {
  protected:
    // Buffers of 100, 412 and 512 bytes: a request scattered over guest pages.
    GuestBuffers scattered() {
        GuestBuffers buffers;
        buffers.append(std::span(a_).first(100));
        buffers.append(std::span(b_).first(412));
        buffers.append(c_);
        return buffers;
    }
    std::vector<uint8_t> gathered() const {
        std::vector<uint8_t> out(a_.begin(), a_.begin() + 100);
        out.insert(out.end(), b_.begin(), b_.begin() + 412);
        out.insert(out.end(), c_.begin(), c_.end());
        return out;
    }

    TempImage file{kImageSize, 0xaa};
    DiskImage image = DiskImage::open(file.config());

  private:
    std::vector<uint8_t> a_ = pattern(100, 1), b_ = pattern(412, 50), c_ = pattern(512, 200);
};

TEST_F(DiskIoTest, WritesAndReadsScatteredBuffers) {
    ASSERT_TRUE(image.write(512, scattered()));
    EXPECT_EQ(file.read(512, 1024), gathered());
    EXPECT_EQ(file.read(0, 512), filled(512, 0xaa)) << "nothing outside the range";
    EXPECT_EQ(file.read(1536, 512), filled(512, 0xaa));

    const auto on_disk = pattern(1024, 7);
    file.write(4096, on_disk);
    auto into = scattered();
    ASSERT_TRUE(image.read(4096, into));
    EXPECT_EQ(gathered(), on_disk);
}

TEST_F(DiskIoTest, ReadingPastAShrunkImageFails) {
    ASSERT_EQ(::truncate(file.path().c_str(), 1024), 0);
    auto into = scattered();
    auto result = image.read(512, into);
    ASSERT_FALSE(result);
    EXPECT_EQ(result.error(), std::errc::io_error);
}

TEST_F(DiskIoTest, Flushes) {
    EXPECT_TRUE(image.flush());
}

TEST_F(DiskIoTest, DiscardDeallocatesAndReadsZero) {
    struct stat before {};
    ASSERT_EQ(::stat(file.path().c_str(), &before), 0);
    ASSERT_TRUE(image.discard(8192, 16384));
    struct stat after {};
    ASSERT_EQ(::stat(file.path().c_str(), &after), 0);
    EXPECT_LT(after.st_blocks, before.st_blocks);
    EXPECT_EQ(after.st_size, before.st_size);
    EXPECT_EQ(file.read(8192, 16384), filled(16384, 0));
    EXPECT_EQ(file.read(8192 - 512, 512), filled(512, 0xaa));
}

TEST_F(DiskIoTest, WriteZeroesZeroesTheRangeWithOrWithoutUnmap) {
    ASSERT_TRUE(image.write_zeroes(1024, 2048, false));
    EXPECT_EQ(file.read(1024, 2048), filled(2048, 0));
    ASSERT_TRUE(image.write_zeroes(8192, 8192, true));
    EXPECT_EQ(file.read(8192, 8192), filled(8192, 0));
    EXPECT_EQ(file.read(512, 512), filled(512, 0xaa));
    EXPECT_EQ(file.read(3072, 512), filled(512, 0xaa));
}

TEST(DiskIoFallbackTest, WriteZeroesWritesZeroesWhereFallocateCannot) {
    // tmpfs has no FALLOC_FL_ZERO_RANGE.
    if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no /dev/shm";
    TempImage file(256 * 1024, 0x55, "/dev/shm");
    DiskImage image = DiskImage::open(file.config());
    ASSERT_TRUE(image.write_zeroes(4096, 200 * 1024, false));
    EXPECT_EQ(file.read(4096, 200 * 1024), filled(200 * 1024, 0));
    EXPECT_EQ(file.read(0, 4096), filled(4096, 0x55));
    EXPECT_EQ(file.read(204 * 1024, 4096), filled(4096, 0x55));
}

// --- execute(): a parsed request on the image ---

TEST_F(DiskIoTest, ExecutesReadsWritesAndFlushes) {
    Request write{.type = RequestType::Out, .offset = 2048, .data = scattered()};
    ASSERT_TRUE(execute(write, image, "", false));
    ASSERT_TRUE(execute(write, image, "", true)) << "write-through flushes too";
    EXPECT_EQ(file.read(2048, 1024), gathered());

    file.write(0, pattern(1024, 9));
    Request read{.type = RequestType::In, .offset = 0, .data = scattered()};
    ASSERT_TRUE(execute(read, image, "", false));
    EXPECT_EQ(gathered(), pattern(1024, 9));

    EXPECT_TRUE(execute(Request{.type = RequestType::Flush}, image, "", false));
}

TEST_F(DiskIoTest, ExecutesDiscardAndWriteZeroesRanges) {
    Request zeroes{.type = RequestType::WriteZeroes,
                   .ranges = {{.offset = 0, .length = 512}, {.offset = 4096, .length = 1024}}};
    ASSERT_TRUE(execute(zeroes, image, "", false));
    EXPECT_EQ(file.read(0, 512), filled(512, 0));
    EXPECT_EQ(file.read(512, 512), filled(512, 0xaa));
    EXPECT_EQ(file.read(4096, 1024), filled(1024, 0));

    Request discard{.type = RequestType::Discard, .ranges = {{.offset = 16384, .length = 4096}}};
    ASSERT_TRUE(execute(discard, image, "", false));
    EXPECT_EQ(file.read(16384, 4096), filled(4096, 0));
}

TEST_F(DiskIoTest, GetIdWritesTheIdNulPaddedTo20Bytes) {
    std::vector<uint8_t> id(24, 0xff);
    Request request{.type = RequestType::GetId};
    request.data.append(std::span(id).first(20));
    ASSERT_TRUE(execute(request, image, "disk-7", false));
    std::vector<uint8_t> expected(24, 0);
    std::memcpy(expected.data(), "disk-7", 6);
    std::fill(expected.begin() + 20, expected.end(), 0xff);
    EXPECT_EQ(id, expected);

    ASSERT_TRUE(execute(request, image, "0123456789abcdefghijKLM", false));
    EXPECT_EQ(std::string(id.begin(), id.begin() + 20), "0123456789abcdefghij");
}

TEST(DiskIoReadOnlyTest, AReadOnlyImageCannotBeWritten) {
    TempImage file(4096, 0x11);
    DiskImage image = DiskImage::open(file.config(true));
    EXPECT_TRUE(image.read_only());
    std::vector<uint8_t> data(512, 0x22);
    GuestBuffers buffers;
    buffers.append(data);
    EXPECT_FALSE(image.write(0, buffers)) << "opened O_RDONLY";
    EXPECT_EQ(file.read(0, 512), filled(512, 0x11));
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
