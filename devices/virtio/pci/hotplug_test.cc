// A virtio-blk disk hot-plugged into an empty root port and released again, without a vCPU:
// the test plays pciehp (slot control) and virtio_pci_modern (the rings) through ECAM and MMIO.
// After the release nothing of the disk is left: no BAR in the MMIO space, no doorbell, no
// MSI-X vector, no file descriptor, and the writes the driver saw complete are in the image.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
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

constexpr devices::testing::PciAddr kPort{0, 1, 0};
constexpr uint64_t kWindow = 0xc000'0000;
constexpr uint16_t kSlotControl = 0x40 + 0x18;  // the PCI Express capability comes first
constexpr uint16_t kPowerIndicatorOn = 1 << 8, kPowerIndicatorOff = 3 << 8, kPowerOff = 1 << 10;
using virtio::testing::open_fd_count;

class HotplugTest : public ::testing::Test {
  protected:
    HotplugTest() {
        h.bridge.set_unplug_handler([this](uint8_t, std::shared_ptr<devices::pci::PciFunction> f) {
            released = std::move(f);
        });
        port = h.bridge.add_empty_root_port().port;
    }

    // Plugs a disk on `image`; pciehp powers the slot on, the PCI core assigns the BAR and
    // virtio_pci_modern sets up one queue.
    void plug_and_probe(const blk::testing::TempImage& image) {
        auto device = std::make_unique<blk::BlkDevice>(blk::testing::disk_config(image), io);
        h.bridge.plug(port, std::make_shared<VirtioPciFunction>(std::move(device), h.platform,
                                                                guest.memory()));
        h.ecam_write<uint16_t>(kPort, kSlotControl, kPowerIndicatorOn);
        auto drivers = testing::enumerate_root_ports(h, kWindow);
        ASSERT_EQ(drivers.size(), 1u);
        driver = std::move(drivers[0]);
        ring = std::make_unique<virtio::testing::TestDriver>(guest, 16);
        driver->enable_msix(2);
        driver->negotiate(kFeatureVersion1);
        driver->setup_queue(0, ring->config(), 1);
        driver->set_status(testing::PciDriver::kDriverOkStatus);
    }

    // A write of `data` at `sector`, kicked; returns where the status byte goes.
    GuestAddr write(uint64_t sector, std::span<const uint8_t> data) {
        const GuestAddr status = virtio::testing::add_blk_write(guest, *ring, sector, data);
        driver->kick(0);
        return status;
    }
    bool run_until(const std::function<bool()>& done) {
        return virtio::testing::run_io_until(io, done);
    }

    // pciehp's removal: the driver resets the device, then the slot is powered off.
    void release() {
        driver->set_status(0);
        h.ecam_write<uint16_t>(kPort, kSlotControl, kPowerIndicatorOn | kPowerOff);
    }

    boost::asio::io_context io;
    devices::testing::PciHarness h;
    virtio::testing::TestGuest guest{4 << 20};
    uint8_t port = 0;
    std::unique_ptr<testing::PciDriver> driver;
    std::unique_ptr<virtio::testing::TestDriver> ring;
    std::shared_ptr<devices::pci::PciFunction> released;
};

TEST_F(HotplugTest, AReleasedDiskLeavesNothingBehindAndKeepsItsWrites) {
    blk::testing::TempImage image(64 * 1024);
    const size_t regions_before = h.mmio.stats().by_region.size();
    plug_and_probe(image);
    EXPECT_EQ(h.platform.ioeventfds.size(), 1u);  // the queue's doorbell at the BAR
    const std::vector<uint8_t> data(512, 0x5a);
    const GuestAddr status = write(3, data);
    ASSERT_TRUE(run_until([&] { return ring->used_idx() == 1; }));
    EXPECT_EQ(guest.read(status, 1)[0], 0);

    release();
    ASSERT_TRUE(released);
    EXPECT_EQ(h.mmio.stats().by_region.size(), regions_before);  // no stale BAR
    EXPECT_EQ(h.mmio_read<uint32_t>(driver->bar()), 0xffff'ffffu);
    EXPECT_TRUE(h.platform.ioeventfds.empty());  // no doorbell left at the old BAR
    EXPECT_EQ(released.use_count(), 1);
    released.reset();  // what mvmm's releaser thread does: the last reference
    // The MSI-X vectors are freed; vector 0 is the root port's MSI.
    for (const auto& vector : h.platform.vectors) {
        if (vector->index > 0) {
            EXPECT_EQ(vector.use_count(), 1) << "vector " << vector->index;
        }
    }
    EXPECT_EQ(image.read(3 * 512, 512), data);
}

TEST_F(HotplugTest, TheSamePortTakesADiskAgainOncePciehpTurnedItsIndicatorOff) {
    blk::testing::TempImage first(64 * 1024), second(64 * 1024);
    plug_and_probe(first);
    ASSERT_TRUE(run_until([] { return true; }));
    release();
    released.reset();
    // After this first cycle (the io_context made its epoll and eventfds for it), a disk's
    // whole life leaves the fd count where it was: the image and every eventfd closed.
    const size_t fds_before = open_fd_count();
    EXPECT_THROW(plug_and_probe(second), std::runtime_error);
    h.ecam_write<uint16_t>(kPort, kSlotControl, kPowerIndicatorOff | kPowerOff);
    plug_and_probe(second);
    EXPECT_GT(open_fd_count(), fds_before);
    const std::vector<uint8_t> data(512, 0x17);
    write(0, data);
    ASSERT_TRUE(run_until([&] { return ring->used_idx() == 1; }));
    release();
    released.reset();
    EXPECT_EQ(second.read(0, 512), data);
    EXPECT_EQ(open_fd_count(), fds_before);
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
