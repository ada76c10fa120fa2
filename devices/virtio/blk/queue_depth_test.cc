// A virtio-blk queue on its queue worker, the test playing the driver: the queue's depth
// reaches the host (the guest's requests are in the image at once, not one after another, as
// they were when each request's I/O blocked its queue), and an operation the host refuses to
// take fails its request instead of losing it.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <cstring>
#include <deque>
#include <optional>

#include "devices/block/faulty_image.h"
#include "devices/block/gated_image.h"
#include "devices/block/temp_image.h"
#include "devices/virtio/blk/io.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::blk {
namespace {

namespace vt = ::mvmm::devices::virtio::testing;

constexpr uint16_t kQueueSize = 32;  // 8 reads of 3 descriptors each fit

class BlkQueueTest : public ::testing::Test {
  protected:
    // The disk the queues serve, `image`, which must outlive the test's queues.
    void use(block::DiskImage& image) {
        info = {.capacity_sectors = image.size() / kSectorSize, .read_only = image.read_only()};
        capacity = info.capacity_sectors;
        disk.emplace(BlkDisk{image, serial, info, capacity, counters});
    }
    // A 512-byte read of `sector` (header, data, status) on the ring.
    void submit_read(uint64_t sector) {
        const GuestAddr header = guest.alloc(16);
        uint8_t bytes[16] = {};  // type 0: VIRTIO_BLK_T_IN
        std::memcpy(bytes + 8, &sector, 8);
        guest.write(header, bytes);
        const vt::TestDriver::Buffer chain[] = {
            {header, 16, false}, {guest.alloc(512), 512, true}, {guest.alloc(1), 1, true}};
        driver.add_chain(chain);
    }
    bool start(AsyncRequestHandler& queue) {
        const ActivateContext context{guest.memory(),
                                      kFeatureVersion1 | kFeatureEventIdx,
                                      {driver.config()},
                                      {&kick},
                                      interrupt};
        return workers.start(context, 1, kQueueSize, [&](uint16_t) { return &queue; });
    }

    const std::string serial = "test";
    DiskInfo info;
    std::atomic<uint64_t> capacity{0};
    BlkCounters counters;
    std::optional<BlkDisk> disk;
    vt::TestGuest guest;
    boost::asio::io_context io;
    vt::TestDriver driver{guest, kQueueSize};
    EventFd kick;
    vt::FakeInterrupt interrupt;
    QueueWorkers workers{io, "virtio-blk test", counters};
};

TEST_F(BlkQueueTest, EveryReadOfTheRingIsInTheImageAtOnce) {
    block::testing::GatedImage image;
    use(image);
    BlkQueue queue(*disk, block::AioMode::Threads, kQueueSize);
    vt::IoThread thread(io);
    ASSERT_TRUE(start(queue));
    for (uint64_t sector = 0; sector < 8; ++sector) submit_read(sector * 8);
    kick.signal();
    EXPECT_TRUE(image.wait_inside(8)) << "the 8 reads were not in the image side by side";
    image.open_gate();
    EXPECT_TRUE(vt::eventually([&] { return driver.used_idx() == 8; }));
    EXPECT_EQ(counters.bad_requests.load(), 0u);
    EXPECT_EQ(counters.io_errors.load(), 0u);
    workers.stop();
}

// Write-through: the write, then its flush, submitted from the write's completion; the host
// refuses the flush (it throws).
TEST_F(BlkQueueTest, AFlushTheHostRefusesIsAnIoErrorAndTheQueueGoesOn) {
    block::testing::TempImage file(64 * kSectorSize, 0xaa);
    block::testing::FaultyImage image(block::open_disk_image(file.path(), false));
    use(image);
    disk->write_through = true;
    BlkQueue queue(*disk, block::AioMode::Sync, kQueueSize);
    vt::IoThread thread(io);
    ASSERT_TRUE(start(queue));
    image.throw_at(2);
    const GuestAddr refused = vt::add_blk_write(guest, driver, 1, std::vector<uint8_t>(512, 1));
    kick.signal();
    ASSERT_TRUE(vt::eventually([&] { return driver.used_idx() == 1; })) << "the write was lost";
    EXPECT_EQ(guest.read(refused, 1)[0], uint8_t(Status::IoError));
    EXPECT_EQ(counters.io_errors.load(), 1u);
    const GuestAddr next = vt::add_blk_write(guest, driver, 2, std::vector<uint8_t>(512, 2));
    kick.signal();
    ASSERT_TRUE(vt::eventually([&] { return driver.used_idx() == 2; }));
    EXPECT_EQ(guest.read(next, 1)[0], uint8_t(Status::Ok));
    EXPECT_EQ(file.read(2 * kSectorSize, 512), std::vector<uint8_t>(512, 2));
    workers.stop();
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
