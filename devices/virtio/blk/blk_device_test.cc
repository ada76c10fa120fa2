// The device harness: the test plays the guest driver over guest memory, kicks real
// eventfds and runs the io_context the way vmm's I/O threads do.
#include "devices/virtio/blk/blk_device.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "devices/virtio/blk/test_disk.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::blk {
namespace {

namespace vt = ::mvmm::devices::virtio::testing;
using namespace std::chrono_literals;

constexpr uint32_t kIn = 0, kOut = 1, kFlush = 4, kGetId = 8, kDiscard = 11, kWriteZeroes = 13;
constexpr uint64_t kFeatureFlush = 1ull << 9;
constexpr uint64_t kNegotiated =
    kFeatureVersion1 | kFeatureIndirectDesc | kFeatureEventIdx | kFeatureFlush;
constexpr uint64_t kDiskSectors = 128;

struct Submitted {
    uint16_t head;
    GuestAddr data;
    GuestAddr status;
};

std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7);
    return bytes;
}

std::vector<uint8_t> segment(uint64_t sector, uint32_t num_sectors, uint32_t flags) {
    std::vector<uint8_t> bytes(16);
    std::memcpy(bytes.data(), &sector, 8);
    std::memcpy(bytes.data() + 8, &num_sectors, 4);
    std::memcpy(bytes.data() + 12, &flags, 4);
    return bytes;
}

class BlkDeviceTest : public ::testing::Test {
  protected:
    void SetUp() override { make_device(testing::disk_config(image)); }

    void make_device(const DiskConfig& config, uint16_t queue_size = 16) {
        device.reset();
        device = std::make_unique<BlkDevice>(config, io);
        drivers.clear();
        kicks.clear();
        for (uint16_t i = 0; i < config.queues; ++i) {
            drivers.push_back(std::make_unique<vt::TestDriver>(guest, queue_size));
            kicks.emplace_back();
        }
    }

    bool activate(uint64_t features = kNegotiated) {
        ActivateContext context{guest.memory(), features, {}, {}, interrupt};
        for (size_t i = 0; i < drivers.size(); ++i) {
            context.queues.push_back(drivers[i]->config());
            context.kicks.push_back(&kicks[i]);
        }
        return device->activate(std::move(context));
    }

    // Header, then `out` (device-readable) or `in_len` bytes (device-writable), then status.
    Submitted submit(uint32_t type, uint64_t sector, std::span<const uint8_t> out = {},
                     uint32_t in_len = 0, size_t queue = 0, bool indirect = false) {
        const GuestAddr header = guest.alloc(16);
        const uint32_t fields[2] = {type, 0};
        guest.write(header, std::span(reinterpret_cast<const uint8_t*>(fields), 8));
        guest.write(header + 8, std::span(reinterpret_cast<const uint8_t*>(&sector), 8));
        std::vector<vt::TestDriver::Buffer> buffers{{header, 16, false}};
        Submitted submitted{};
        if (!out.empty()) {
            submitted.data = guest.alloc(out.size());
            guest.write(submitted.data, out);
            buffers.push_back({submitted.data, uint32_t(out.size()), false});
        }
        if (in_len > 0) {
            submitted.data = guest.alloc(in_len);
            buffers.push_back({submitted.data, in_len, true});
        }
        submitted.status = guest.alloc(1);
        guest.write(submitted.status, std::vector<uint8_t>{0xff});
        buffers.push_back({submitted.status, 1, true});
        submitted.head = indirect ? drivers[queue]->add_indirect_chain(buffers)
                                  : drivers[queue]->add_chain(buffers);
        return submitted;
    }

    // Runs the io_context on this thread until `done` (false after 5 s).
    template <class Done>
    bool run_until(Done done) {
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            if (io.stopped()) io.restart();
            io.run_one_for(10ms);
        }
        return true;
    }
    void kick_and_wait(uint16_t used_idx, size_t queue = 0) {
        kicks[queue].signal();
        ASSERT_TRUE(run_until([&] { return drivers[queue]->used_idx() == used_idx; }))
            << "used idx " << drivers[queue]->used_idx() << ", expected " << used_idx;
    }
    // Gives the device a chance to do what it should not.
    void run_briefly() {
        io.restart();
        io.run_for(50ms);
    }
    uint8_t status_of(const Submitted& s) const { return guest.read(s.status, 1)[0]; }

    vt::TestGuest guest{1 << 20};
    block::testing::TempImage image{kDiskSectors * 512, 0xaa};
    boost::asio::io_context io;
    std::vector<std::unique_ptr<vt::TestDriver>> drivers;
    std::deque<EventFd> kicks;
    vt::FakeInterrupt interrupt;
    std::unique_ptr<BlkDevice> device;
};

TEST_F(BlkDeviceTest, WritesThenReadsBack) {
    ASSERT_TRUE(activate());
    const auto data = pattern(1024, 3);
    const auto write = submit(kOut, 4, data);
    kick_and_wait(1);
    EXPECT_EQ(status_of(write), 0);
    EXPECT_EQ(drivers[0]->used(0).id, write.head);
    EXPECT_EQ(drivers[0]->used(0).len, 1u);
    EXPECT_EQ(image.read(4 * 512, 1024), data);

    const auto read = submit(kIn, 4, {}, 1024);
    kick_and_wait(2);
    EXPECT_EQ(status_of(read), 0);
    EXPECT_EQ(guest.read(read.data, 1024), data);
    EXPECT_EQ(drivers[0]->used(1).len, 1025u);
    EXPECT_GE(interrupt.queue_notifications.load(), 1);
    EXPECT_EQ(device->counters().requests.load(), 2u);
    EXPECT_FALSE(device->needs_reset());
}

TEST_F(BlkDeviceTest, FlushesAndAnswersGetId) {
    ASSERT_TRUE(activate());
    const auto flush = submit(kFlush, 0);
    const auto get_id = submit(kGetId, 0, {}, 20);
    kick_and_wait(2);
    EXPECT_EQ(status_of(flush), 0);
    EXPECT_EQ(status_of(get_id), 0);
    const std::string serial = disk_serial(testing::disk_config(image));
    auto id = guest.read(get_id.data, 20);
    EXPECT_EQ(std::string(id.begin(), id.begin() + serial.size()), serial);
}

TEST_F(BlkDeviceTest, DiscardsAndWritesZeroes) {
    ASSERT_TRUE(activate());
    const auto zeroes = submit(kWriteZeroes, 0, segment(8, 8, 0));
    const auto discard = submit(kDiscard, 0, segment(32, 32, 0));
    const auto unmap_discard = submit(kDiscard, 0, segment(64, 8, 1));
    kick_and_wait(3);
    EXPECT_EQ(status_of(zeroes), 0);
    EXPECT_EQ(status_of(discard), 0);
    EXPECT_EQ(status_of(unmap_discard), 2) << "VIRTIO_BLK_S_UNSUPP: unmap is for write-zeroes";
    EXPECT_EQ(image.read(8 * 512, 8 * 512), std::vector<uint8_t>(8 * 512, 0));
    EXPECT_EQ(image.read(32 * 512, 32 * 512), std::vector<uint8_t>(32 * 512, 0));
    EXPECT_EQ(image.read(7 * 512, 512), std::vector<uint8_t>(512, 0xaa));
    EXPECT_EQ(image.read(64 * 512, 8 * 512), std::vector<uint8_t>(8 * 512, 0xaa));
    EXPECT_EQ(device->counters().bad_requests.load(), 1u);
}

TEST_F(BlkDeviceTest, BadRequestsCompleteWithAnErrorAndTheQueueGoesOn) {
    ASSERT_TRUE(activate());
    const auto past_end = submit(kIn, kDiskSectors - 1, {}, 1024);
    const auto unknown = submit(99, 0, {}, 512);
    const auto good = submit(kIn, kDiskSectors - 2, {}, 1024);
    kick_and_wait(3);
    EXPECT_EQ(status_of(past_end), 1) << "VIRTIO_BLK_S_IOERR";
    EXPECT_EQ(status_of(unknown), 2) << "VIRTIO_BLK_S_UNSUPP";
    EXPECT_EQ(status_of(good), 0);
    EXPECT_EQ(device->counters().bad_requests.load(), 2u);
    EXPECT_FALSE(device->needs_reset());
}

TEST_F(BlkDeviceTest, AReadOnlyDiskRefusesWrites) {
    make_device(testing::disk_config(image, true));
    EXPECT_TRUE(device->features() & (1ull << 5));    // VIRTIO_BLK_F_RO
    EXPECT_FALSE(device->features() & (1ull << 13));  // no DISCARD
    ASSERT_TRUE(activate());
    const auto write = submit(kOut, 0, pattern(512, 1));
    const auto zeroes = submit(kWriteZeroes, 0, segment(0, 1, 0));
    const auto read = submit(kIn, 0, {}, 512);
    kick_and_wait(3);
    EXPECT_EQ(status_of(write), 1);
    EXPECT_EQ(status_of(zeroes), 1);
    EXPECT_EQ(status_of(read), 0);
    EXPECT_EQ(image.read(0, 512), std::vector<uint8_t>(512, 0xaa));
}

template <class T>
T config_field(const BlkDevice& device, uint64_t offset) {
    T value{};
    device.read_config(offset, std::span(reinterpret_cast<uint8_t*>(&value), sizeof value));
    return value;
}

TEST_F(BlkDeviceTest, ConfigSpaceDescribesTheDisk) {
    DiskConfig config = testing::disk_config(image);
    config.queues = 4;
    make_device(config);
    EXPECT_EQ(device->device_id(), 2u);
    EXPECT_EQ(device->num_queues(), 4);
    EXPECT_TRUE(device->features() & (1ull << 12));  // VIRTIO_BLK_F_MQ
    EXPECT_TRUE(device->features() & kFeatureFlush);
    EXPECT_EQ(device->max_queue_size(), kDefaultQueueSize);
    EXPECT_EQ(config_field<uint64_t>(*device, 0), kDiskSectors);             // capacity
    EXPECT_EQ(config_field<uint32_t>(*device, 12), kDefaultQueueSize - 2u);  // seg_max
    EXPECT_EQ(config_field<uint32_t>(*device, 20), 512u);                    // blk_size
    EXPECT_EQ(config_field<uint16_t>(*device, 34), 4);                       // num_queues
    EXPECT_EQ(config_field<uint32_t>(*device, 36), device->disk_info().max_discard_sectors);
    EXPECT_EQ(config_field<uint32_t>(*device, 48), device->disk_info().max_write_zeroes_sectors);
    EXPECT_EQ(config_field<uint8_t>(*device, 56), 1);  // write_zeroes_may_unmap
    EXPECT_EQ(config_field<uint64_t>(*device, 1000), 0u);
    EXPECT_EQ(config_field<uint64_t>(*device, std::numeric_limits<uint64_t>::max() - 2), 0u);

    make_device(testing::disk_config(image));
    EXPECT_FALSE(device->features() & (1ull << 12)) << "MQ only with more than one queue";
}

TEST_F(BlkDeviceTest, FourKibibyteBlocksAndTheirTopology) {
    DiskConfig config = testing::disk_config(image);
    config.logical_block_size = 4096;
    config.physical_block_size = 16384;
    make_device(config);
    EXPECT_TRUE(device->features() & (1ull << 6)) << "VIRTIO_BLK_F_BLK_SIZE";
    EXPECT_TRUE(device->features() & (1ull << 10)) << "VIRTIO_BLK_F_TOPOLOGY";
    EXPECT_EQ(config_field<uint32_t>(*device, 20), 4096u);  // blk_size
    EXPECT_EQ(config_field<uint8_t>(*device, 24), 2);       // physical_block_exp
    EXPECT_EQ(config_field<uint16_t>(*device, 26), 1);      // min_io_size, in blocks
    EXPECT_EQ(config_field<uint64_t>(*device, 0), kDiskSectors) << "512-byte sectors still";

    testing::TempImage odd(3 * 512);
    config = testing::disk_config(odd);
    config.logical_block_size = 4096;
    EXPECT_THROW(BlkDevice(config, io), std::runtime_error) << "not whole 4 KiB blocks";
    config.logical_block_size = 512;
    config.physical_block_size = 256;
    EXPECT_THROW(BlkDevice(config, io), std::invalid_argument);
}

TEST_F(BlkDeviceTest, AResizedImageIsAConfigChangeWithTheNewCapacity) {
    ASSERT_TRUE(activate());
    const auto past_the_end = submit(kIn, kDiskSectors, {}, 512);
    kick_and_wait(1);
    EXPECT_EQ(status_of(past_the_end), 1) << "IOERR";
    ASSERT_EQ(::truncate(image.path().c_str(), 2 * kDiskSectors * 512), 0);
    EXPECT_EQ(device->resize_from_image(), 2 * kDiskSectors * 512);
    EXPECT_EQ(config_field<uint64_t>(*device, 0), 2 * kDiskSectors);
    EXPECT_EQ(interrupt.config_notifications.load(), 1);
    const auto grown = submit(kIn, kDiskSectors, {}, 512);
    kick_and_wait(2);
    EXPECT_EQ(status_of(grown), 0) << "the new blocks are there";
    EXPECT_EQ(device->resize_from_image(), 2 * kDiskSectors * 512);
    EXPECT_EQ(interrupt.config_notifications.load(), 1) << "no change, no interrupt";
    ASSERT_EQ(::truncate(image.path().c_str(), 2 * kDiskSectors * 512 + 7), 0);
    EXPECT_THROW(device->resize_from_image(), std::runtime_error);
    EXPECT_EQ(config_field<uint64_t>(*device, 0), 2 * kDiskSectors) << "the old size stays";
}

// queue-size=64: every queue's maximum, and the request slots of each queue's pool.
TEST_F(BlkDeviceTest, QueueSizeBoundsEveryRingAndItsRequestSlots) {
    DiskConfig config = testing::disk_config(image);
    config.queues = 2;
    config.queue_size = 64;
    make_device(config, 128);
    EXPECT_EQ(device->max_queue_size(), 64);
    EXPECT_EQ(config_field<uint32_t>(*device, 12), 62u) << "seg_max: the header and the status";
    EXPECT_FALSE(activate()) << "a ring larger than queue-size";

    make_device(config, 64);
    ASSERT_TRUE(activate());
    // A full ring: 64 requests in flight at once, one slot each.
    std::vector<Submitted> reads;
    for (int i = 0; i < 64; ++i) reads.push_back(submit(kIn, i, {}, 512, 1, true));
    kick_and_wait(64, 1);
    for (const auto& read : reads) EXPECT_EQ(status_of(read), 0);
    // The longest chain the ring holds fits a slot: the header, seg_max sectors, the status.
    const GuestAddr header = guest.alloc(16);
    guest.write(header, std::vector<uint8_t>{kOut, 0, 0, 0, 0, 0, 0, 0});  // sector 0
    std::vector<vt::TestDriver::Buffer> chain{{header, 16, false}};
    for (uint8_t i = 0; i < 62; ++i) {
        chain.push_back({guest.alloc(512), 512, false});
        guest.write(chain.back().addr, std::vector<uint8_t>(512, i));
    }
    const GuestAddr status = guest.alloc(1);
    chain.push_back({status, 1, true});
    drivers[0]->add_chain(chain);
    kick_and_wait(1);
    EXPECT_EQ(guest.read(status, 1)[0], 0);
    EXPECT_EQ(image.read(61 * 512, 512), std::vector<uint8_t>(512, 61));
}

TEST_F(BlkDeviceTest, ServesEveryQueueAndTheDriverMayUseFewer) {
    DiskConfig config = testing::disk_config(image);
    config.queues = 3;
    make_device(config);
    ActivateContext context{guest.memory(), kNegotiated, {}, {}, interrupt};
    for (size_t i = 0; i < 3; ++i) {
        context.queues.push_back(drivers[i]->config());
        context.kicks.push_back(&kicks[i]);
    }
    context.queues[2].ready = false;
    ASSERT_TRUE(device->activate(std::move(context)));
    const auto on_queue_1 = submit(kIn, 0, {}, 512, 1);
    kick_and_wait(1, 1);
    EXPECT_EQ(status_of(on_queue_1), 0);
    EXPECT_EQ(interrupt.last_queue.load(), 1);
    EXPECT_EQ(drivers[0]->used_idx(), 0);
}

TEST_F(BlkDeviceTest, EventIdxSuppressesInterruptsAndKicks) {
    ASSERT_TRUE(activate());
    submit(kFlush, 0);
    kick_and_wait(1);  // used idx 0 -> 1 crosses used_event 0
    EXPECT_EQ(interrupt.queue_notifications.load(), 1);
    EXPECT_EQ(drivers[0]->avail_event(), 1) << "the driver is asked to kick for its next buffer";

    drivers[0]->set_used_event(5);
    submit(kFlush, 0);
    kick_and_wait(2);
    EXPECT_EQ(interrupt.queue_notifications.load(), 1) << "the driver asked to wait for 5";
}

TEST_F(BlkDeviceTest, WithoutEventIdxHonoursNoInterrupt) {
    ASSERT_TRUE(activate(kFeatureVersion1 | kFeatureFlush));
    drivers[0]->set_avail_flags(1);  // VRING_AVAIL_F_NO_INTERRUPT
    submit(kFlush, 0);
    kick_and_wait(1);
    EXPECT_EQ(interrupt.queue_notifications.load(), 0);
    EXPECT_EQ(drivers[0]->used_flags(), 0) << "kicks are wanted again once the ring is drained";
}

TEST_F(BlkDeviceTest, DrainsAFullQueueInBatchesAndKeepsListening) {
    ASSERT_TRUE(activate());
    std::vector<Submitted> requests;
    for (int i = 0; i < 16; ++i) requests.push_back(submit(kIn, i, {}, 512, 0, true));
    kick_and_wait(16);
    for (const auto& r : requests) EXPECT_EQ(status_of(r), 0);
    const auto later = submit(kFlush, 0);
    kick_and_wait(17);
    EXPECT_EQ(status_of(later), 0);
}

TEST_F(BlkDeviceTest, ACorruptRingSetsNeedsResetWithoutCrashing) {
    ASSERT_TRUE(activate());
    const GuestAddr buffer = guest.alloc(16);
    drivers[0]->set_descriptor(0, {buffer.value(), 16, vt::kDescNext, 0});  // a loop
    drivers[0]->publish(0);
    kicks[0].signal();
    ASSERT_TRUE(run_until([&] { return device->needs_reset(); }));
    EXPECT_EQ(interrupt.config_notifications.load(), 1);
    EXPECT_EQ(device->counters().failed_queues.load(), 1u);
    EXPECT_EQ(drivers[0]->used_idx(), 0);

    kicks[0].signal();  // the queue is dead: kicks are ignored
    run_briefly();
    EXPECT_EQ(drivers[0]->used_idx(), 0);

    device->reset();
    EXPECT_FALSE(device->needs_reset());
}

TEST_F(BlkDeviceTest, RefusesToActivateABadLayout) {
    drivers[0] = std::make_unique<vt::TestDriver>(guest, 16);
    ActivateContext context{
        guest.memory(), kNegotiated, {drivers[0]->config()}, {&kicks[0]}, interrupt};
    context.queues[0].size = 12;
    EXPECT_FALSE(device->activate(context));
    context.queues[0] = drivers[0]->config();
    context.queues[0].used = GuestAddr(1 << 20);
    EXPECT_FALSE(device->activate(context));
    context.queues[0] = drivers[0]->config();
    context.kicks.clear();
    EXPECT_FALSE(device->activate(context));
}

TEST_F(BlkDeviceTest, ResetStopsTheQueuesAndActivateWorksAgain) {
    ASSERT_TRUE(activate());
    device->reset();
    submit(kFlush, 0);
    kicks[0].signal();
    run_briefly();
    EXPECT_EQ(drivers[0]->used_idx(), 0) << "processed after reset";
    EXPECT_FALSE(device->needs_reset()) << "a cancelled wait is no failure";
    EXPECT_EQ(interrupt.config_notifications.load(), 0);
    device->reset();  // twice is fine

    // Linux resets at probe and sets the device up again with fresh rings.
    drivers[0] = std::make_unique<vt::TestDriver>(guest, 16);
    ASSERT_TRUE(activate());
    const auto flush = submit(kFlush, 0);
    kick_and_wait(1);
    EXPECT_EQ(status_of(flush), 0);
}

TEST_F(BlkDeviceTest, ResetWaitsForAnIoThreadAndNothingRunsAfterIt) {
    ASSERT_TRUE(activate());
    auto work = boost::asio::make_work_guard(io);
    std::thread io_thread([this] { io.run(); });

    uint16_t used = 0;
    for (int round = 0; round < 20; ++round) {
        for (int i = 0; i < 4; ++i) submit(kOut, i, pattern(512, uint8_t(round)));
        kicks[0].signal();
        used += 4;
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (drivers[0]->used_idx() != used && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(1ms);
        ASSERT_EQ(drivers[0]->used_idx(), used);
    }
    for (int i = 0; i < 4; ++i) submit(kOut, i, pattern(512, 1));
    kicks[0].signal();
    device->reset();  // races with the batch the kick started
    const uint16_t after_reset = drivers[0]->used_idx();
    kicks[0].signal();
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(drivers[0]->used_idx(), after_reset);
    EXPECT_FALSE(device->needs_reset());
    EXPECT_EQ(interrupt.config_notifications.load(), 0);

    work.reset();
    io.stop();
    io_thread.join();
}

TEST_F(BlkDeviceTest, RefusesBadConfigurations) {
    device.reset();  // it holds the image's lock
    DiskConfig config = testing::disk_config(image);
    for (uint16_t size : {0, 2, 3, 96, 2048}) {
        config.queue_size = size;
        EXPECT_THROW(BlkDevice(config, io), std::invalid_argument) << "queue-size " << size;
    }
    config.queue_size = kDefaultQueueSize;
    config.queues = 0;
    EXPECT_THROW(BlkDevice(config, io), std::invalid_argument);
    config.path = "/nonexistent.img";
    EXPECT_THROW(BlkDevice(config, io), std::runtime_error);
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
