#include "devices/virtio/blk/io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "devices/virtio/blk/test_disk.h"

namespace mvmm::devices::virtio::blk {
namespace {

using block::testing::TempImage;

using block::testing::filled;
using DiskIoTest = block::testing::ImageTest;

// --- execute(): a parsed request on the image ---

TEST_F(DiskIoTest, ExecutesReadsWritesAndFlushes) {
    Request write{.type = RequestType::Out, .offset = 2048, .data = scattered()};
    ASSERT_TRUE(execute(write, *image, "", false));
    ASSERT_TRUE(execute(write, *image, "", true)) << "write-through flushes too";
    EXPECT_EQ(file.read(2048, 1024), gathered());

    file.write(0, block::testing::pattern(1024, 9));
    Request read{.type = RequestType::In, .offset = 0, .data = scattered()};
    ASSERT_TRUE(execute(read, *image, "", false));
    EXPECT_EQ(gathered(), block::testing::pattern(1024, 9));

    EXPECT_TRUE(execute(Request{.type = RequestType::Flush}, *image, "", false));
}

TEST_F(DiskIoTest, ExecutesDiscardAndWriteZeroesRanges) {
    Request zeroes{.type = RequestType::WriteZeroes,
                   .ranges = {{.offset = 0, .length = 512}, {.offset = 4096, .length = 1024}}};
    ASSERT_TRUE(execute(zeroes, *image, "", false));
    EXPECT_EQ(file.read(0, 512), filled(512, 0));
    EXPECT_EQ(file.read(512, 512), filled(512, 0xaa));
    EXPECT_EQ(file.read(4096, 1024), filled(1024, 0));

    Request discard{.type = RequestType::Discard, .ranges = {{.offset = 16384, .length = 4096}}};
    ASSERT_TRUE(execute(discard, *image, "", false));
    EXPECT_EQ(file.read(16384, 4096), filled(4096, 0));
}

TEST_F(DiskIoTest, GetIdWritesTheIdNulPaddedTo20Bytes) {
    std::vector<uint8_t> id(24, 0xff);
    const GuestBuffers::Part id_part[] = {GuestSlice(std::span(id).first(20))};
    const Request request{.type = RequestType::GetId, .data = GuestBuffers(id_part)};
    ASSERT_TRUE(execute(request, *image, "disk-7", false));
    std::vector<uint8_t> expected(24, 0);
    std::memcpy(expected.data(), "disk-7", 6);
    std::fill(expected.begin() + 20, expected.end(), 0xff);
    EXPECT_EQ(id, expected);

    ASSERT_TRUE(execute(request, *image, "0123456789abcdefghijKLM", false));
    EXPECT_EQ(std::string(id.begin(), id.begin() + 20), "0123456789abcdefghij");
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
