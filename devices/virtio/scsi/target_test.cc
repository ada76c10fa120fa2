// The target and its LUNs on temporary images: CDB in, outcome and data out, as the request
// queues run them (buffers in host memory stand for the guest's).
#include "devices/virtio/scsi/target.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "devices/virtio/scsi/big_endian.h"
#include "devices/block/temp_image.h"

namespace mvmm::devices::virtio::scsi {
namespace {

using block::testing::TempImage;

constexpr uint64_t kBlocks = 64;

std::vector<uint8_t> rw10(uint8_t opcode, uint32_t lba, uint16_t blocks, uint8_t flags = 0) {
    return {opcode,       flags, uint8_t(lba >> 24),   uint8_t(lba >> 16), uint8_t(lba >> 8),
            uint8_t(lba), 0,     uint8_t(blocks >> 8), uint8_t(blocks),    0};
}

class TargetTest : public ::testing::Test {
  protected:
    TargetTest() {
        images.push_back(std::make_unique<TempImage>(kBlocks * 512, 0xaa));
        images.push_back(std::make_unique<TempImage>(kBlocks * 512, 0xbb));
        target = std::make_unique<Target>(std::vector<LunConfig>{
            {images[0]->path(), 0, false, "lun-zero", {}}, {images[1]->path(), 300, true, "ro", {}}});
    }

    // Runs `cdb` with `in_size` bytes of data-in, or `out` as data-out.
    TargetOutcome run(uint16_t lun, const std::vector<uint8_t>& cdb, size_t in_size,
                      std::vector<uint8_t> out = {}) {
        data_in.assign(in_size, 0xee);
        data_out = std::move(out);
        const GuestBuffers::Part out_part(data_out), in_part(data_in);
        return target->execute(lun, cdb, GuestBuffers(std::span(&out_part, 1)),
                               GuestBuffers(std::span(&in_part, 1)));
    }

    std::vector<std::unique_ptr<TempImage>> images;
    std::unique_ptr<Target> target;
    std::vector<uint8_t> data_in, data_out;
};

TEST_F(TargetTest, WritesAndReadsBlocks) {
    const auto written = run(0, rw10(0x2a, 4, 2), 0, block::testing::pattern(1024, 3));
    EXPECT_EQ(written.delivery, Delivery::Done);
    EXPECT_FALSE(written.outcome.sense);
    EXPECT_EQ(written.outcome.transferred, 1024u);
    EXPECT_EQ(images[0]->read(4 * 512, 1024), block::testing::pattern(1024, 3));

    const auto read = run(0, rw10(0x28, 4, 2), 1024);
    EXPECT_FALSE(read.outcome.sense);
    EXPECT_EQ(data_in, block::testing::pattern(1024, 3));

    EXPECT_FALSE(run(0, rw10(0x2a, 0, 1, 0x08), 0, std::vector<uint8_t>(512, 1)).outcome.sense)
        << "FUA";
    EXPECT_FALSE(run(0, rw10(0x35, 0, 0), 0).outcome.sense) << "SYNCHRONIZE CACHE";
}

TEST_F(TargetTest, AnswersFromWhatItKnowsWithoutTheImage) {
    ASSERT_FALSE(run(0, {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8).outcome.sense);
    EXPECT_EQ(load_be(data_in, 0, 4), kBlocks - 1);
    const auto inquiry = run(0, {0x12, 0, 0, 0, 255, 0}, 255);
    EXPECT_EQ(inquiry.outcome.transferred, 36u) << "the data, not the allocation length";
    EXPECT_EQ(data_in[0], 0x00);
    const auto cut = run(300, {0x12, 1, 0x80, 0, 4, 0}, 4);
    EXPECT_EQ(cut.outcome.transferred, 4u) << "cut to the allocation length";
    EXPECT_EQ(load_be(data_in, 2, 2), 2u) << "the serial 'ro'";
    ASSERT_FALSE(run(300, {0x1a, 0, 0x3f, 0, 255, 0}, 255).outcome.sense);
    EXPECT_EQ(data_in[2] & 0x80, 0x80) << "write-protected";
}

TEST_F(TargetTest, ReportLunsListsEveryLunFromAnyLunNumber) {
    const std::vector<uint8_t> report{0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
    for (uint16_t lun : {0, 7, 300}) {
        const auto result = run(lun, report, 256);
        ASSERT_FALSE(result.outcome.sense) << lun;
        EXPECT_EQ(result.outcome.transferred, 24u);
        EXPECT_EQ(load_be(data_in, 0, 4), 16u);
        EXPECT_EQ(load_be(data_in, 8, 2), 0u);
        EXPECT_EQ(load_be(data_in, 16, 2), 0x4000u | 300);
    }
}

TEST_F(TargetTest, ALunWithNoDiskAnswersLikeARealTarget) {
    const auto inquiry = run(5, {0x12, 0, 0, 0, 96, 0}, 96);
    ASSERT_FALSE(inquiry.outcome.sense);
    EXPECT_EQ(data_in[0], 0x7f) << "peripheral qualifier 011b: no device";
    EXPECT_EQ(run(5, rw10(0x28, 0, 1), 512).outcome.sense, sense::kLunNotSupported);
    EXPECT_EQ(run(5, {0x00, 0, 0, 0, 0, 0}, 0).outcome.sense, sense::kLunNotSupported);
    EXPECT_EQ(run(5, {0x12, 1, 0x83, 0, 255, 0}, 255).outcome.sense, sense::kLunNotSupported);
    EXPECT_EQ(run(5, {}, 0).outcome.sense, sense::kLunNotSupported);
    const auto request_sense = run(5, {0x03, 0, 0, 0, 18, 0}, 18);
    ASSERT_FALSE(request_sense.outcome.sense);
    EXPECT_EQ(data_in[2], 0x05);
    EXPECT_EQ(data_in[12], 0x25) << "LOGICAL UNIT NOT SUPPORTED as parameter data";
}

TEST_F(TargetTest, GuestMistakesAreSenseAndTheImageIsUntouched) {
    EXPECT_EQ(run(0, rw10(0x28, kBlocks - 1, 2), 1024).outcome.sense, sense::kLbaOutOfRange);
    EXPECT_EQ(run(300, rw10(0x2a, 0, 1), 0, std::vector<uint8_t>(512, 1)).outcome.sense,
              sense::kWriteProtected);
    EXPECT_EQ(images[1]->read(0, 512), std::vector<uint8_t>(512, 0xbb));
    EXPECT_EQ(run(0, {0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 512).outcome.sense,
              sense::kInvalidOpcode);
}

TEST_F(TargetTest, BuffersThatDoNotFitTheCdbAreAnOverrun) {
    EXPECT_EQ(run(0, rw10(0x28, 0, 2), 512).delivery, Delivery::Overrun) << "room for 1 of 2";
    EXPECT_EQ(run(0, rw10(0x2a, 0, 1), 512).delivery, Delivery::Overrun) << "data the wrong way";
    EXPECT_EQ(run(0, {0x12, 0, 0, 0, 96, 0}, 36).delivery, Delivery::Overrun);
    EXPECT_EQ(images[0]->read(0, 512), std::vector<uint8_t>(512, 0xaa));
}

TEST_F(TargetTest, UnmapAndWriteSameDeallocateAndZero) {
    std::vector<uint8_t> list(24, 0);
    list[1] = 22, list[3] = 16;  // one descriptor: LBA 8, 8 blocks
    list[15] = 8, list[19] = 8;
    const std::vector<uint8_t> unmap{0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0};
    EXPECT_FALSE(run(0, unmap, 0, list).outcome.sense);
    EXPECT_EQ(images[0]->read(8 * 512, 8 * 512), std::vector<uint8_t>(8 * 512, 0));
    EXPECT_EQ(images[0]->read(7 * 512, 512), std::vector<uint8_t>(512, 0xaa));
    list[15] = kBlocks;  // past the end
    EXPECT_EQ(run(0, unmap, 0, list).outcome.sense, sense::kLbaOutOfRange);

    std::vector<uint8_t> same(16, 0);
    same[0] = 0x93, same[1] = 0x08, same[9] = 20, same[13] = 4;  // UNMAP, LBA 20, 4 blocks
    EXPECT_FALSE(run(0, same, 0, std::vector<uint8_t>(512, 0)).outcome.sense);
    EXPECT_EQ(images[0]->read(20 * 512, 4 * 512), std::vector<uint8_t>(4 * 512, 0));
    same[1] = 0;
    EXPECT_FALSE(run(0, same, 0, block::testing::pattern(512, 9)).outcome.sense);
    for (int block = 20; block < 24; ++block)
        EXPECT_EQ(images[0]->read(block * 512, 512), block::testing::pattern(512, 9)) << block;
}

TEST_F(TargetTest, AHostReadErrorIsAMediumError) {
    ASSERT_EQ(::truncate(images[0]->path().c_str(), 512), 0);
    EXPECT_EQ(run(0, rw10(0x28, 8, 1), 512).outcome.sense, sense::kReadError);
}

TEST(TargetConfig, RefusesLunsPastTheLimitTwiceOrEmpty) {
    TempImage a(512), b(512), empty(0);
    EXPECT_THROW(Target({{a.path(), kMaxLun + 1, false, "a", {}}}), std::invalid_argument);
    EXPECT_THROW(Target({{a.path(), 3, true, "a", {}}, {b.path(), 3, true, "b", {}}}),
                 std::invalid_argument);
    EXPECT_THROW(Target({{empty.path(), 0, false, "e", {}}}), std::runtime_error);
    EXPECT_NO_THROW(Target({{a.path(), kMaxLun, false, "a", {}}}));
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi
