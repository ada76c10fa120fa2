// virtio-blk over virtio-pci behind PCIe root ports, without a vCPU: the test enumerates the
// bus like Linux, initializes each disk like virtio_pci_modern, writes through the rings and
// kicks through the notify area; the disks run on an io_context as on vmm's I/O threads.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "devices/pci/test_harness.h"
#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/blk/test_disk.h"
#include "devices/virtio/pci/test_pci_driver.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::pci {
namespace {

using namespace std::chrono_literals;

constexpr int kDisks = 64;
constexpr uint64_t kWindow = 0xc000'0000;  // each port gets 1 MiB of it

struct Disk {
    std::unique_ptr<blk::testing::TempImage> image;
    std::unique_ptr<virtio::testing::TestDriver> ring;
    std::unique_ptr<testing::PciDriver> driver;
    GuestAddr status;
    const blk::BlkCounters* counters = nullptr;  // the device's, which the function owns
};

class BlkOverPciTest : public ::testing::Test {
  protected:
    void enumerate() {
        auto drivers = testing::enumerate_root_ports(h, kWindow);
        for (size_t i = 0; i < drivers.size(); ++i) disks.at(i).driver = std::move(drivers[i]);
    }

    // virtio_pci_modern's probe, one queue with MSI-X vector 1.
    void initialize(Disk& disk) {
        disk.driver->enable_msix(2);
        disk.driver->negotiate(kFeatureVersion1);
        disk.driver->set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
        disk.driver->setup_queue(0, disk.ring->config(), 1);
        disk.driver->set_status(testing::PciDriver::kDriverOkStatus);
    }

    // A write of `data` to sector `sector`: header, data, status byte.
    void submit_write(Disk& disk, uint64_t sector, std::span<const uint8_t> data) {
        disk.status = virtio::testing::add_blk_write(guest, *disk.ring, sector, data);
    }

    bool run_until(const std::function<bool()>& done) {
        return virtio::testing::run_io_until(io, done);
    }

    void add_disks(int count) {
        for (int i = 0; i < count; ++i) {
            Disk disk;
            disk.image = std::make_unique<blk::testing::TempImage>(64 * 1024);
            disk.ring = std::make_unique<virtio::testing::TestDriver>(guest, 16);
            auto device =
                std::make_unique<blk::BlkDevice>(blk::testing::disk_config(*disk.image), io);
            disk.counters = &device->counters();
            h.bridge.attach(
                std::make_shared<VirtioPciFunction>(std::move(device), h.platform, guest.memory()),
                devices::pci::NewRootPort{});
            disks.push_back(std::move(disk));
        }
        enumerate();
    }

    // Each function allocates its config vector, then one per queue; then its root port the
    // port's MSI vector.
    const devices::testing::FakePlatform::Vector& queue_vector(int disk) {
        return *h.platform.vectors.at(3 * disk + 1);
    }
    const devices::testing::FakePlatform::Vector& config_vector(int disk) {
        return *h.platform.vectors.at(3 * disk);
    }

    boost::asio::io_context io;
    devices::testing::PciHarness h;
    virtio::testing::TestGuest guest{4 << 20};
    std::vector<Disk> disks;
};

TEST_F(BlkOverPciTest, SixtyFourDisksBehindRootPortsTakeWrites) {
    add_disks(kDisks);
    for (int i = 0; i < kDisks; ++i) {
        Disk& disk = disks[i];
        ASSERT_TRUE(disk.driver) << "disk " << i << " was not found";
        initialize(disk);
        ASSERT_EQ(disk.driver->status(), testing::PciDriver::kDriverOkStatus) << "disk " << i;
        submit_write(disk, 1, std::vector<uint8_t>(512, static_cast<uint8_t>(i)));
        disk.driver->kick(0);
    }
    ASSERT_TRUE(run_until([&] {
        for (auto& disk : disks)
            if (disk.ring->used_idx() != 1) return false;
        return true;
    }));
    for (int i = 0; i < kDisks; ++i) {
        EXPECT_EQ(guest.read(disks[i].status, 1)[0], 0) << "disk " << i;
        EXPECT_EQ(disks[i].image->read(512, 512),
                  std::vector<uint8_t>(512, static_cast<uint8_t>(i)));
        EXPECT_GE(queue_vector(i).triggers, 1u) << "disk " << i;
        ASSERT_TRUE(queue_vector(i).message);
        EXPECT_EQ(queue_vector(i).message->data, 0x41u);
    }
}

TEST_F(BlkOverPciTest, CorruptRingShowsAsNeedsResetWithAConfigInterrupt) {
    add_disks(1);
    Disk& disk = disks[0];
    initialize(disk);
    disk.ring->set_descriptor(0, {.addr = 0x1000,
                                  .len = 16,
                                  .flags = virtio::testing::kDescNext,
                                  .next = 99});  // past the table
    disk.ring->publish(0);
    disk.driver->kick(0);
    ASSERT_TRUE(run_until([&] { return config_vector(0).triggers > 0; }));
    EXPECT_EQ(disk.driver->status(), testing::PciDriver::kDriverOkStatus | status::kNeedsReset);
    disk.driver->set_status(0);
    EXPECT_EQ(disk.driver->status(), 0);
    disk.ring = std::make_unique<virtio::testing::TestDriver>(guest, 16);
    initialize(disk);  // the driver recovers the device with a reset and new rings
    EXPECT_EQ(disk.driver->status(), testing::PciDriver::kDriverOkStatus);
}

TEST_F(BlkOverPciTest, StatisticsFollowTheDriverThroughTheTransport) {
    add_disks(1);
    Disk& disk = disks[0];
    EXPECT_FALSE(disk.counters->statistics().driver_ok);
    const auto before = std::chrono::steady_clock::now();
    initialize(disk);
    const auto started = disk.counters->statistics();
    ASSERT_TRUE(started.driver_ok) << "the status write with DRIVER_OK";
    EXPECT_GE(*started.driver_ok, before);
    EXPECT_FALSE(started.first_notify);
    ASSERT_EQ(started.queues.size(), 1u);
    EXPECT_EQ(started.queues[0].slots, 16u) << "the ring size the driver chose";
    io.poll();  // the drain at activation: the queue then waits for a kick

    submit_write(disk, 1, std::vector<uint8_t>(512, 7));
    const auto kicked = std::chrono::steady_clock::now();
    disk.driver->kick(0);  // through the notify area (no ioeventfd in this harness)
    ASSERT_TRUE(run_until([&] { return disk.ring->used_idx() == 1; }));
    const auto served = disk.counters->statistics();
    ASSERT_TRUE(served.first_notify);
    EXPECT_GE(*served.first_notify, kicked);
    const auto& queue = served.queues.at(0);
    EXPECT_EQ(queue.request_alloc, SlotSource::pool);
    EXPECT_EQ(queue.peak_slots_in_use, 1u);
    EXPECT_GT(queue.pool_resident_bytes, 0u);
    EXPECT_FALSE(queue.heap_allocations) << "no allocation hook in this test";
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
