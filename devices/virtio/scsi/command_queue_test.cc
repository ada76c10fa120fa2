// READ, WRITE and SYNCHRONIZE CACHE as a request queue runs them, through the device harness
// (controller_rig.h): image operations through the LUN's IoQueue of the queue (a read; a
// write, then a flush with FUA or the write cache off; a flush), on LUNs whose images count
// their calls.
#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>
#include <unistd.h>

#include "devices/block/faulty_image.h"
#include "devices/virtio/scsi/controller_rig.h"

namespace mvmm::devices::virtio::scsi::testing {
namespace {

constexpr uint16_t kLun = 1;

class ScsiImageIoTest : public ControllerTest {
  protected:
    // LUN kLun on `image`, whose calls the test counts, its unit attention taken.
    bt::FaultyImage& add_lun(LunConfig config) {
        config.path = image.path();
        config.lun = kLun;
        config.serial = "counted";
        auto counted = std::make_unique<bt::FaultyImage>(
            block::open_disk_image(config.path, config.read_only, config.image));
        bt::FaultyImage& added = *counted;
        controller->add_lun(0, kLun, std::make_shared<Lun>(config, std::move(counted)));
        expect_good(send(address(kLun), {0x03, 0, 0, 0, 18, 0}, {}, 18));
        return added;
    }
    // Waits for `sent`, the next command of the request queue, which must be GOOD and move
    // every byte of its buffers.
    void expect_good(const Sent& sent) {
        wait_used(++commands);
        EXPECT_EQ(response_of(sent).response, VIRTIO_SCSI_S_OK);
        EXPECT_EQ(response_of(sent).status, 0) << "sense key " << int(response_of(sent).sense[2]);
        EXPECT_EQ(response_of(sent).resid, 0u);
    }
    // Waits for `sent`, which must be CHECK CONDITION with this sense key and code.
    void expect_sense(const Sent& sent, uint8_t key, uint8_t asc) {
        wait_used(++commands);
        EXPECT_EQ(response_of(sent).response, VIRTIO_SCSI_S_OK);
        EXPECT_EQ(response_of(sent).status, 2) << "CHECK CONDITION";
        EXPECT_EQ(response_of(sent).sense[2], key);
        EXPECT_EQ(response_of(sent).sense[12], asc);
    }

    bt::TempImage image{128 * 512, 0xaa};  // 128 blocks of 512 bytes, 16 of 4096
    uint16_t commands = 0;                 // used on the request queue since activate()
};

TEST_F(ScsiImageIoTest, WritesReadsAndFlushesThroughTheLunsIoQueue) {
    bt::FaultyImage& counted = add_lun({});
    const auto data = bt::pattern(1024, 3);
    expect_good(send(address(kLun), {0x2a, 0, 0, 0, 0, 4, 0, 0, 2, 0}, data));
    EXPECT_EQ(image.read(4 * 512, 1024), data);
    EXPECT_EQ(counted.flushes(), 0) << "the write cache is on";

    const auto read = send(address(kLun), {0x28, 0, 0, 0, 0, 4, 0, 0, 2, 0}, {}, 1024);
    expect_good(read);
    EXPECT_EQ(guest.read(read.data, 1024), data);

    expect_good(
        send(address(kLun), {0x2a, 0x08, 0, 0, 0, 0, 0, 0, 1, 0}, std::vector<uint8_t>(512, 1)));
    EXPECT_EQ(counted.flushes(), 1) << "FUA: stable before it completes";
    EXPECT_EQ(image.read(0, 512), std::vector<uint8_t>(512, 1));
    expect_good(send(address(kLun), {0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(counted.flushes(), 2) << "SYNCHRONIZE CACHE";
    EXPECT_EQ(image.read(8 * 512, 512), std::vector<uint8_t>(512, 0xaa)) << "nothing else";
}

TEST_F(ScsiImageIoTest, WithTheWriteCacheOffEveryWriteIsFlushed) {
    bt::FaultyImage& counted = add_lun({});
    const auto caching = send(address(kLun), {0x1a, 0x08, 0x08, 0, 24, 0}, {}, 24);
    expect_good(caching);
    auto list = guest.read(caching.data, 24);
    list[0] = 0;      // the mode data length is reserved in MODE SELECT
    list[4 + 2] = 0;  // WCE off
    expect_good(send(address(kLun), {0x15, 0x10, 0, 0, 24, 0}, list));
    EXPECT_EQ(counted.flushes(), 1) << "what the cache held is made stable";

    const auto data = bt::pattern(512, 5);
    expect_good(send(address(kLun), {0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0}, data));
    EXPECT_EQ(counted.flushes(), 2) << "written through";
    EXPECT_EQ(image.read(512, 512), data);
}

TEST_F(ScsiImageIoTest, AHostReadErrorIsAMediumError) {
    add_lun({});
    ASSERT_EQ(::truncate(image.path().c_str(), 512), 0);
    expect_sense(send(address(kLun), {0x28, 0, 0, 0, 0, 8, 0, 0, 1, 0}, {}, 512), 0x03, 0x11);
    EXPECT_EQ(controller->counters().check_conditions.load(), 1u);
}

TEST_F(ScsiImageIoTest, ReadsFourKibibyteBlocks) {
    image.write(15 * 4096, std::vector<uint8_t>(4096, 0x11));
    LunConfig big;
    big.logical_block_size = 4096;
    big.physical_block_size = 16384;
    add_lun(big);
    const auto read = send(address(kLun), {0x28, 0, 0, 0, 0, 15, 0, 0, 1, 0}, {}, 4096);
    expect_good(read);
    EXPECT_EQ(guest.read(read.data, 4096), std::vector<uint8_t>(4096, 0x11));
}

// A WRITE with FUA whose flush (submitted from the write's completion) the host refuses to
// take: a write error for the guest, and a LUN reset (which waits for the command) completes.
TEST_F(ScsiImageIoTest, AFlushTheHostRefusesIsAWriteErrorAndTheResetCompletes) {
    LunConfig sync;
    sync.aio = block::AioMode::Sync;  // the image's calls on the queue's context
    bt::FaultyImage& faulty = add_lun(sync);
    faulty.throw_at(2);
    expect_sense(
        send(address(kLun), {0x2a, 0x08, 0, 0, 0, 3, 0, 0, 1, 0}, std::vector<uint8_t>(512, 1)),
        0x03, 0x0c);
    const GuestAddr reset = tmf(VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, address(kLun));
    wait_used(1, 0);
    EXPECT_EQ(guest.read(reset, 1)[0], VIRTIO_SCSI_S_OK);
    EXPECT_FALSE(controller->needs_reset()) << "the queue goes on";
    expect_sense(send(address(kLun), {0x00}), 0x06, 0x29);  // the reset's unit attention
    const auto read = send(address(kLun), {0x28, 0, 0, 0, 0, 3, 0, 0, 1, 0}, {}, 512);
    expect_good(read);
    EXPECT_EQ(guest.read(read.data, 512), std::vector<uint8_t>(512, 1)) << "the write was done";
}

// A READ started in the same batch as a chain that breaks the ring (a readable buffer after a
// writable one): the queue stops before its io_uring SQE was submitted, and the reset the
// driver then does still completes it (it waited for ever for a completion never asked for).
TEST_F(ScsiImageIoTest, AResetAfterARingErrorCompletesTheReadStartedBeforeIt) {
    if (!block::io_uring_supported()) GTEST_SKIP() << "this kernel refuses io_uring";
    const auto read = send(address(0), {0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0}, {}, 512, 2, 1, false);
    const GuestAddr header = guest.alloc(64), response = guest.alloc(64);
    const vt::TestDriver::Buffer broken[] = {{response, 64, true}, {header, 64, false}};
    drivers[2]->add_chain(broken);
    kicks[2].signal();
    ASSERT_TRUE(vt::eventually([&] { return controller->needs_reset(); }));
    controller->reset();
    EXPECT_EQ(used_since_activation(2), 1);
    EXPECT_EQ(response_of(read).response, VIRTIO_SCSI_S_OK);
    EXPECT_EQ(guest.read(read.data, 512), std::vector<uint8_t>(512, 0xaa));
}

// cache=none (O_DIRECT) with every aio= backend: the guest's buffers, one byte off any
// alignment, go through the queue's bounce buffers both ways, in more than one window.
TEST_F(ScsiImageIoTest, CacheNoneMovesUnalignedGuestBuffersThroughBounceBuffers) {
    bt::TempImage file(1 << 20, 0x55);
    data_misalignment = 1;
    constexpr uint16_t kBlocksMoved = 140;  // 70 KiB: two bounce windows of 64 KiB
    for (const auto aio :
         {block::AioMode::IoUring, block::AioMode::Threads, block::AioMode::Sync}) {
        if (aio == block::AioMode::IoUring && !block::io_uring_supported()) continue;
        const LunConfig config{.path = file.path(),
                               .lun = kLun,
                               .serial = "direct",
                               .image = {.cache = block::CacheMode::None, .qcow2 = {}},
                               .aio = aio};
        try {
            controller->add_lun(config);
        } catch (const block::ImageError& e) {
            if (std::string_view(e.what()).find("O_DIRECT") == std::string_view::npos) throw;
            GTEST_SKIP() << "the filesystem of " << file.path()
                         << " refuses O_DIRECT: " << e.what();
        }
        ASSERT_GT(controller->target(0)->find(kLun)->image().buffer_alignment(), 1u);
        expect_good(send(address(kLun), {0x03, 0, 0, 0, 18, 0}, {}, 18));  // the unit attention

        const uint8_t lba = 7 + uint8_t(aio);
        const auto data = bt::pattern(kBlocksMoved * 512, uint8_t(aio));
        const auto write =
            send(address(kLun), {0x2a, 0, 0, 0, 0, lba, 0, 0, kBlocksMoved, 0}, data);
        ASSERT_EQ(write.data.value() % 2, 1u) << "an odd address";
        expect_good(write);
        EXPECT_EQ(file.read(lba * 512, data.size()), data) << block::to_string(aio);
        EXPECT_EQ(file.read((lba + kBlocksMoved) * 512, 512), std::vector<uint8_t>(512, 0x55))
            << "nothing past the blocks";

        const auto read = send(address(kLun), {0x28, 0, 0, 0, 0, lba, 0, 0, kBlocksMoved, 0}, {},
                               uint32_t(data.size()));
        expect_good(read);
        EXPECT_EQ(guest.read(read.data, data.size()), data) << block::to_string(aio);
        controller->remove_lun(0, kLun);  // closes the image: the next backend opens it
    }
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi::testing
