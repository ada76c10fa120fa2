// The target and its LUNs on temporary images: CDB in, outcome and data out, as the request
// queues check and run them (buffers in host memory stand for the guest's).  READ, WRITE and
// SYNCHRONIZE CACHE run through a request queue's IoQueue instead: command_queue_test.cc.
#include "devices/virtio/scsi/target.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "devices/block/temp_image.h"
#include "devices/virtio/scsi/big_endian.h"

namespace mvmm::devices::virtio::scsi {
namespace {

using block::testing::TempImage;

constexpr uint64_t kBlocks = 64;
const std::vector<uint8_t> kTestUnitReady{0x00, 0, 0, 0, 0, 0};
const std::vector<uint8_t> kRequestSense{0x03, 0, 0, 0, 18, 0};

std::vector<uint8_t> rw10(uint8_t opcode, uint32_t lba, uint16_t blocks, uint8_t flags = 0) {
    return {opcode,       flags, uint8_t(lba >> 24),   uint8_t(lba >> 16), uint8_t(lba >> 8),
            uint8_t(lba), 0,     uint8_t(blocks >> 8), uint8_t(blocks),    0};
}

// check(), then run(): what a request queue does with every command but READ, WRITE and
// SYNCHRONIZE CACHE.
TargetOutcome check_and_run(const Target& target, uint16_t lun, std::span<const uint8_t> cdb,
                            const GuestBuffers& data_out, const GuestBuffers& data_in) {
    auto checked = target.check(lun, cdb, data_out, data_in);
    if (const auto* answer = std::get_if<TargetOutcome>(&checked)) return *answer;
    const auto ran = target.run(std::get<CheckedCommand>(checked), data_out, data_in);
    EXPECT_TRUE(ran) << "runs through a request queue's IoQueue";
    return {Delivery::Done, ran.value_or(Outcome::check(sense::kInvalidOpcode))};
}

class TargetTest : public ::testing::Test {
  protected:
    TargetTest() {
        images.push_back(std::make_unique<TempImage>(kBlocks * 512, 0xaa));
        images.push_back(std::make_unique<TempImage>(kBlocks * 512, 0xbb));
        target = std::make_unique<Target>(std::vector<LunConfig>{
            {images[0]->path(), 0, false, "lun-zero"}, {images[1]->path(), 300, true, "ro"}});
        // A LUN just switched on reports it once; the tests start after that.
        for (uint16_t lun : {0, 300}) run(lun, kTestUnitReady, 0);
    }

    // Runs `cdb` with `in_size` bytes of data-in, or `out` as data-out.
    TargetOutcome run(uint16_t lun, const std::vector<uint8_t>& cdb, size_t in_size,
                      std::vector<uint8_t> out = {}) {
        data_in.assign(in_size, 0xee);
        data_out = std::move(out);
        const GuestBuffers::Part out_part(data_out), in_part(data_in);
        return check_and_run(*target, lun, cdb, GuestBuffers(std::span(&out_part, 1)),
                             GuestBuffers(std::span(&in_part, 1)));
    }

    std::vector<std::unique_ptr<TempImage>> images;
    std::unique_ptr<Target> target;
    std::vector<uint8_t> data_in, data_out;
};

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
    EXPECT_EQ(run(0, {0xc0, 0, 0, 0, 0, 0}, 512).outcome.sense, sense::kInvalidOpcode);
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

TEST_F(TargetTest, AnUnmapWithNoParameterListIsGood) {
    const auto result = run(0, {0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0);
    EXPECT_EQ(result.delivery, Delivery::Done);
    EXPECT_FALSE(result.outcome.sense) << "SBC-3: a parameter list length of 0 is no error";
}

TEST_F(TargetTest, WriteSameTenRepeatsTheBlock) {
    const std::vector<uint8_t> same{0x41, 0, 0, 0, 0, 30, 0, 0, 3, 0};  // LBA 30, 3 blocks
    ASSERT_FALSE(run(0, same, 0, block::testing::pattern(512, 4)).outcome.sense);
    for (int block = 30; block < 33; ++block)
        EXPECT_EQ(images[0]->read(block * 512, 512), block::testing::pattern(512, 4)) << block;
    EXPECT_EQ(images[0]->read(33 * 512, 512), std::vector<uint8_t>(512, 0xaa));
    EXPECT_EQ(run(300, same, 0, std::vector<uint8_t>(512, 0)).outcome.sense,
              sense::kWriteProtected);
}

TEST_F(TargetTest, VerifyComparesTheDataOutWithTheMedium) {
    const auto verify10 = [](uint8_t flags) { return rw10(0x2f, 2, 2, flags); };
    EXPECT_FALSE(run(0, verify10(0x00), 0).outcome.sense) << "BYTCHK 0: no data";
    EXPECT_FALSE(run(0, verify10(0x02), 0, std::vector<uint8_t>(1024, 0xaa)).outcome.sense);
    auto differs = std::vector<uint8_t>(1024, 0xaa);
    differs[700] = 0;
    EXPECT_EQ(run(0, verify10(0x02), 0, differs).outcome.sense, sense::kMiscompareDuringVerify);
    std::vector<uint8_t> verify16(16, 0);
    verify16[0] = 0x8f, verify16[1] = 0x02, verify16[9] = 1, verify16[13] = 1;
    EXPECT_FALSE(run(300, verify16, 0, std::vector<uint8_t>(512, 0xbb)).outcome.sense)
        << "a read-only LUN verifies too";
    EXPECT_EQ(run(0, verify10(0x02), 0, std::vector<uint8_t>(512, 0xaa)).delivery,
              Delivery::Overrun)
        << "less data than the blocks";
}

TEST_F(TargetTest, ModeSelectTurnsTheWriteCacheOffUntilAReset) {
    const std::vector<uint8_t> sense_caching{0x1a, 0x08, 0x08, 0, 255, 0};
    auto wce = [&](uint8_t control) {
        auto cdb = sense_caching;
        cdb[2] |= control << 6;
        EXPECT_FALSE(run(0, cdb, 255).outcome.sense);
        return data_in[4 + 2] & 0x04;
    };
    EXPECT_EQ(wce(0), 0x04) << "current: on";
    EXPECT_EQ(wce(1), 0x04) << "changeable";
    ASSERT_FALSE(run(0, sense_caching, 255).outcome.sense);
    std::vector<uint8_t> list(data_in.begin(), data_in.begin() + 24);
    list[0] = 0;      // the mode data length is reserved in MODE SELECT
    list[4 + 2] = 0;  // WCE off
    const std::vector<uint8_t> select{0x15, 0x10, 0, 0, 24, 0};
    ASSERT_FALSE(run(0, select, 0, list).outcome.sense);
    EXPECT_EQ(wce(0), 0) << "current: off";
    EXPECT_EQ(wce(2), 0x04) << "default: on";
    list[4 + 3] = 1;  // a bit that is not changeable
    EXPECT_EQ(run(0, select, 0, list).outcome.sense, sense::kInvalidFieldInParameterList);
    EXPECT_EQ(run(0, {0x15, 0x11, 0, 0, 24, 0}, 0, list).outcome.sense, sense::kInvalidFieldInCdb)
        << "SP: nothing is saved";
    target->find(0)->reset();
    run(0, kTestUnitReady, 0);
    EXPECT_EQ(wce(0), 0x04) << "a reset turns it back on";
}

TEST_F(TargetTest, ReportSupportedOperationCodes) {
    std::vector<uint8_t> rsoc{0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0};
    const auto all = run(0, rsoc, 4096);
    ASSERT_FALSE(all.outcome.sense);
    EXPECT_EQ(load_be(data_in, 0, 4), 8 * supported_commands().size());
    EXPECT_EQ(all.outcome.transferred, 4 + 8 * supported_commands().size());
    EXPECT_EQ(data_in[4 + 7], 6) << "TEST UNIT READY is 6 bytes";
    rsoc[2] = 1, rsoc[3] = 0x28;  // READ(10)
    ASSERT_FALSE(run(0, rsoc, 4096).outcome.sense);
    EXPECT_EQ(data_in[1] & 0x07, 3) << "supported";
    EXPECT_EQ(load_be(data_in, 2, 2), 10u);
    EXPECT_EQ(data_in[4], 0x28);
    rsoc[3] = 0x04;  // FORMAT UNIT
    ASSERT_FALSE(run(0, rsoc, 4096).outcome.sense);
    EXPECT_EQ(data_in[1] & 0x07, 1) << "not supported";
    rsoc[3] = 0x9e;  // SERVICE ACTION IN(16) has service actions
    EXPECT_EQ(run(0, rsoc, 4096).outcome.sense, sense::kInvalidFieldInCdb);
    rsoc[2] = 2, rsoc[5] = 0x10;  // READ CAPACITY(16)
    ASSERT_FALSE(run(0, rsoc, 4096).outcome.sense);
    EXPECT_EQ(load_be(data_in, 2, 2), 16u);
    rsoc[2] = 0x80;  // RCTD: no timeouts descriptors here
    EXPECT_EQ(run(0, rsoc, 4096).outcome.sense, sense::kInvalidFieldInCdb);
}

TEST_F(TargetTest, AUnitAttentionIsReportedOnceAfterPowerOnAResetOrAResize) {
    TempImage fresh_image(kBlocks * 512);
    Target fresh({{fresh_image.path(), 1, true, "fresh"}});
    auto run_fresh = [&](const std::vector<uint8_t>& cdb, size_t in) {
        data_in.assign(in, 0);
        const GuestBuffers::Part in_part(data_in);
        return check_and_run(fresh, 1, cdb, GuestBuffers(), GuestBuffers(std::span(&in_part, 1)))
            .outcome.sense;
    };
    EXPECT_FALSE(run_fresh({0x12, 0, 0, 0, 36, 0}, 36)) << "INQUIRY does not take it";
    EXPECT_FALSE(run_fresh({0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, 256)) << "nor REPORT LUNS";
    EXPECT_EQ(run_fresh(kTestUnitReady, 0), sense::kPowerOnOrReset);
    EXPECT_FALSE(run_fresh(kTestUnitReady, 0)) << "once";

    Lun& lun = *target->find(0);
    lun.reset();
    ASSERT_FALSE(run(0, kRequestSense, 18).outcome.sense) << "REQUEST SENSE reports it";
    EXPECT_EQ(data_in[2], 0x06);
    EXPECT_EQ(data_in[12], 0x29);
    EXPECT_FALSE(run(0, kTestUnitReady, 0).outcome.sense) << "and takes it";

    ASSERT_EQ(::truncate(images[0]->path().c_str(), 2 * kBlocks * 512), 0);
    EXPECT_EQ(lun.reread_capacity(), 2 * kBlocks * 512);
    EXPECT_EQ(run(0, {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8).outcome.sense,
              sense::kCapacityDataChanged);
    ASSERT_FALSE(run(0, {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8).outcome.sense);
    EXPECT_EQ(load_be(data_in, 0, 4), 2 * kBlocks - 1);
    EXPECT_EQ(lun.reread_capacity(), 2 * kBlocks * 512);
    EXPECT_FALSE(run(0, kTestUnitReady, 0).outcome.sense) << "no change, no attention";
    ASSERT_EQ(::truncate(images[0]->path().c_str(), 2 * kBlocks * 512 + 100), 0);
    EXPECT_THROW(lun.reread_capacity(), std::runtime_error) << "not whole blocks";
    EXPECT_EQ(lun.info().blocks, 2 * kBlocks) << "the old size stays";
}

TEST(TargetBlockSize, FourKibibyteLogicalBlocks) {
    TempImage image(16 * 4096, 0x11);
    Target target({{.path = image.path(),
                    .lun = 0,
                    .read_only = false,
                    .serial = "big",
                    .target = 0,
                    .logical_block_size = 4096,
                    .physical_block_size = 16384}});
    std::vector<uint8_t> in(4096);
    const GuestBuffers::Part part(in);
    const auto execute = [&](const std::vector<uint8_t>& cdb) {
        return check_and_run(target, 0, cdb, GuestBuffers(), GuestBuffers(std::span(&part, 1)))
            .outcome;
    };
    execute(kTestUnitReady);
    std::vector<uint8_t> capacity16(16, 0);
    capacity16[0] = 0x9e, capacity16[1] = 0x10, capacity16[13] = 32;
    ASSERT_FALSE(execute(capacity16).sense);
    EXPECT_EQ(load_be(in, 0, 8), 15u);
    EXPECT_EQ(load_be(in, 8, 4), 4096u);
    EXPECT_EQ(in[13] & 0x0f, 2) << "4 logical blocks a physical one";
    EXPECT_EQ(execute(rw10(0x28, 16, 1)).sense, sense::kLbaOutOfRange);
}

TEST(TargetConfig, RefusesBadBlockSizes) {
    TempImage odd(3 * 512), image(4096);
    const auto lun = [](const TempImage& disk, uint32_t logical, uint32_t physical) {
        LunConfig config{disk.path(), 0, false, "s"};
        config.logical_block_size = logical;
        config.physical_block_size = physical;
        return std::vector{config};
    };
    EXPECT_THROW(Target(lun(odd, 4096, 0)), std::runtime_error) << "not whole 4 KiB blocks";
    EXPECT_THROW(Target(lun(image, 1024, 0)), std::invalid_argument);
    EXPECT_THROW(Target(lun(image, 4096, 512)), std::invalid_argument) << "physical < logical";
    EXPECT_THROW(Target(lun(image, 512, 3000)), std::invalid_argument);
    EXPECT_NO_THROW(Target(lun(image, 512, 4096)));
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
