// open_disk_image and qcow2: the magic picks the format, format= forces one, and a qcow2 image
// answers the interface's cache calls where raw reports none.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "devices/block/disk_image.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block {
namespace {

using namespace qcow2::testing;
using ::testing::AllOf;
using ::testing::HasSubstr;

class OpenDiskImageTest : public ::testing::Test {
  protected:
    void SetUp() override { SKIP_WITHOUT_QEMU_IMG(); }

    std::string qcow2_image() {
        const std::string path = dir_.file("disk.qcow2");
        must("qemu-img create -q -f qcow2 " + path + " 4M");
        must("qemu-io -f qcow2 -c 'write -P 0x5a 0 4096' " + path);
        return path;
    }
    std::string raw_image() {
        const std::string path = dir_.file("disk.raw");
        write_file_bytes(path, 0, pattern(1 << 20, 1));
        return path;
    }
    static std::vector<uint8_t> read(const DiskImage& image, uint64_t offset, size_t size) {
        std::vector<uint8_t> out(size);
        const qcow2::HostBuffer buffer(out);
        EXPECT_TRUE(image.read(offset, buffer.buffers()));
        return out;
    }

    ScratchDir dir_;
};

TEST_F(OpenDiskImageTest, TheMagicPicksQcow2) {
    const auto image = open_disk_image(qcow2_image(), true);
    EXPECT_EQ(image->format(), ImageFormat::Qcow2);
    EXPECT_EQ(image->size(), 4u << 20);
    EXPECT_EQ(read(*image, 0, 4096), std::vector<uint8_t>(4096, 0x5a));
    EXPECT_GT(image->cache_stats().l2.capacity, 0u);
}

TEST_F(OpenDiskImageTest, ResizeIsRefusedAndTheSizeStays) {
    const std::string path = qcow2_image();
    const auto image = open_disk_image(path, false);
    must("truncate -s 16M " + path);  // the file grows; the header's size does not
    EXPECT_THAT([&] { image->reread_size(512); },
                ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("not supported")));
    EXPECT_EQ(image->size(), 4u << 20);
}

TEST_F(OpenDiskImageTest, RawHasNoCaches) {
    const auto image = open_disk_image(raw_image(), true);
    EXPECT_EQ(image->format(), ImageFormat::Raw);
    EXPECT_EQ(image->cache_stats().l2.capacity, 0u);
    EXPECT_EQ(image->clean_idle({}), 0u);
}

TEST_F(OpenDiskImageTest, TheCacheOptionsReachQcow2) {
    ImageOptions options;
    options.qcow2.refcount_cache_size = 16 * 65536;
    options.qcow2.cache_alloc = qcow2::CacheAlloc::Heap;
    const auto image = open_disk_image(qcow2_image(), true, options);
    EXPECT_EQ(image->cache_stats().refcount.capacity, 16u);
}

TEST_F(OpenDiskImageTest, ARawFileForcedToQcow2IsAnErrorNamingIt) {
    const std::string path = raw_image();
    try {
        open_disk_image(path, true, {.format = ImageFormat::Qcow2, .qcow2 = {}});
        FAIL() << "opened";
    } catch (const ImageError& e) {
        EXPECT_THAT(e.what(), AllOf(HasSubstr(path), HasSubstr("not a qcow2 image")));
    }
}

TEST_F(OpenDiskImageTest, AQcow2ImageForcedToRawOpensRaw) {
    const std::string path = qcow2_image();
    const auto image = open_disk_image(path, true, {.format = ImageFormat::Raw, .qcow2 = {}});
    EXPECT_EQ(image->format(), ImageFormat::Raw);
    EXPECT_EQ(image->size(), file_bytes(path).size());
    EXPECT_EQ(read(*image, 0, 4), (std::vector<uint8_t>{'Q', 'F', 'I', 0xfb}));
}

}  // namespace
}  // namespace mvmm::devices::block
