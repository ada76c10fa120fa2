// A virtio-blk queue's depth reaches the host: the guest's requests are in the image at once,
// not one after another (as they were when each request's I/O blocked its queue).
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <cstring>
#include <deque>

#include "devices/block/gated_image.h"
#include "devices/virtio/blk/io.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::blk {
namespace {

namespace vt = ::mvmm::devices::virtio::testing;

constexpr uint16_t kQueueSize = 32;  // 8 reads of 3 descriptors each fit

class BlkQueueDepthTest : public ::testing::Test {
  protected:
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

    block::testing::GatedImage image;
    const std::string serial = "gated";
    const DiskInfo info{.capacity_sectors = image.size() / kSectorSize, .read_only = true};
    std::atomic<uint64_t> capacity{info.capacity_sectors};
    BlkCounters counters;
    const BlkDisk disk{image, serial, info, capacity, counters};
    vt::TestGuest guest;
    boost::asio::io_context io;
    vt::TestDriver driver{guest, kQueueSize};
    EventFd kick;
    vt::FakeInterrupt interrupt;
    QueueWorkers workers{io, "virtio-blk gated", counters};
};

TEST_F(BlkQueueDepthTest, EveryReadOfTheRingIsInTheImageAtOnce) {
    BlkQueue queue(disk, block::AioMode::Threads, kQueueSize);
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

}  // namespace
}  // namespace mvmm::devices::virtio::blk
