// add-disk, remove-disk and query-disks on a machine without vCPUs: a host bridge with empty
// root ports, the test playing pciehp through ECAM, the disks' I/O on an io_context thread.
#include "vmm/disk_hotplug.h"

#include <gtest/gtest.h>

#include "devices/block/qcow2/test_support.h"
#include "devices/block/temp_image.h"
#include "devices/pci/test_harness.h"
#include "devices/virtio/scsi/controller.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm {
namespace {

using devices::virtio::testing::eventually;
using nlohmann::json;

constexpr uint16_t kSlotControl = 0x40 + 0x18;  // the PCI Express capability comes first
constexpr uint16_t kPowerIndicatorOff = 3 << 8, kPowerOff = 1 << 10;

using devices::virtio::testing::open_fd_count;

class DiskHotplugTest : public ::testing::Test {
  protected:
    DiskHotplugTest() {
        for (int i = 0; i < 2; ++i) ports.push_back(h.bridge.add_empty_root_port());
    }

    // What pciehp does once the driver let go: the slot's power off, then its indicator.
    void guest_powers_off(uint8_t port) {
        const auto& at = ports.at(port - 1);
        const devices::testing::PciAddr address{0, at.device, at.function};
        h.ecam_write<uint16_t>(address, kSlotControl, kPowerOff);
        h.ecam_write<uint16_t>(address, kSlotControl, kPowerOff | kPowerIndicatorOff);
    }
    json disks() { return hotplug.query()["disks"]; }

    devices::block::testing::TempImage image{64 * 1024};
    boost::asio::io_context io;
    devices::testing::PciHarness h;
    devices::virtio::testing::TestGuest guest{1 << 20};
    VcpuDiagnostics diagnostics{1};
    std::vector<devices::pci::RootBusAddress> ports;
    std::vector<std::chrono::seconds> clean_intervals;  // what the hot-added disks asked for
    DiskHotplug hotplug{
        {h.bridge, h.mmio, h.platform, guest.memory(), io, SlotSource::pool, 1, diagnostics,
         [this](std::chrono::seconds s) { clean_intervals.push_back(s); }},
        {}};
};

std::vector<std::string> visited_paths(const DiskHotplug& hotplug) {
    std::vector<std::string> paths;
    hotplug.for_each_image(
        [&](devices::block::DiskImage& image) { paths.push_back(image.path()); });
    return paths;
}

TEST(DiskOptionText, JsonValuesBecomeDiskItems) {
    EXPECT_EQ(disk_option_text({{"path", "a.img"}, {"readonly", true}, {"queues", 2}}),
              "path=a.img,queues=2,readonly=on");
    EXPECT_EQ(disk_option_text(json::object()), "");
    EXPECT_THROW(disk_option_text({{"path", "a,b.img"}}), std::invalid_argument);
    EXPECT_THROW(disk_option_text({{"queues", -1}}), std::invalid_argument);
    EXPECT_THROW(disk_option_text({{"queues", 1.5}}), std::invalid_argument);
    EXPECT_THROW(disk_option_text({{"path", json::array()}}), std::invalid_argument);
}

TEST_F(DiskHotplugTest, AddRemoveAndTheGuestsReleaseCloseTheImage) {
    const size_t fds_before = open_fd_count();
    const json added = hotplug.add({{"path", image.path()}, {"serial", "hp0"}});
    EXPECT_EQ(added["id"], "disk0");
    EXPECT_EQ(added["port"], ports[0].port);
    EXPECT_GT(open_fd_count(), fds_before);
    ASSERT_EQ(disks().size(), 1u);
    EXPECT_EQ(disks()[0]["state"], "present");
    EXPECT_EQ(disks()[0]["hotplugged"], true);
    EXPECT_EQ(hotplug.query()["bar_regions"], 1);
    EXPECT_EQ(hotplug.disks().size(), 1u);

    // Not powered on by the guest yet: pciehp would power a button press's slot on, so the
    // removal is at once.
    EXPECT_EQ(hotplug.remove({{"id", "disk0"}})["state"], "removing");
    ASSERT_TRUE(eventually([&] { return disks().empty(); }));
    EXPECT_EQ(open_fd_count(), fds_before);
    EXPECT_EQ(hotplug.query()["released"], 1);
    EXPECT_EQ(hotplug.query()["bar_regions"], 0);
}

TEST_F(DiskHotplugTest, APoweredSlotWaitsForTheGuest) {
    hotplug.add({{"path", image.path()}});
    const auto& at = ports[0];
    h.ecam_write<uint16_t>({0, at.device, at.function}, kSlotControl, uint16_t{1 << 8});  // on
    hotplug.remove({{"id", "disk0"}});
    EXPECT_EQ(disks()[0]["state"], "removing");
    EXPECT_THROW(hotplug.remove({{"id", "disk0"}}), std::runtime_error);  // one press at a time
    guest_powers_off(at.port);
    ASSERT_TRUE(eventually([&] { return disks().empty(); }));
    // The port is free again: the next disk may take it.
    EXPECT_EQ(hotplug.add({{"path", image.path()}})["port"], at.port);
}

TEST_F(DiskHotplugTest, AQcow2DiskIsHotAddedWithItsCacheKeys) {
    using namespace devices::block::qcow2::testing;
    if (!have_qemu_img()) GTEST_SKIP() << "qemu-img (qemu-utils) is not installed";
    const ScratchDir dir;
    const std::string overlay = dir.file("overlay.qcow2");
    must("qemu-img create -q -f qcow2 " + overlay + " 1M");
    hotplug.add({{"path", overlay}, {"cache-clean-interval", 5}, {"l2-cache-size", "64K"}});
    EXPECT_EQ(clean_intervals, std::vector{std::chrono::seconds(5)}) << "the cleaner hears of it";
    hotplug.add({{"path", image.path()}});  // raw: nothing to clean, whatever the default
    EXPECT_EQ(clean_intervals.size(), 1u);
    std::vector<devices::block::ImageFormat> formats;
    hotplug.for_each_image(
        [&](devices::block::DiskImage& image) { formats.push_back(image.format()); });
    EXPECT_EQ(formats,
              (std::vector{devices::block::ImageFormat::Qcow2, devices::block::ImageFormat::Raw}));

    hotplug.remove({{"id", "disk0"}});
    ASSERT_TRUE(eventually([&] { return disks().size() == 1; }));
    EXPECT_EQ(visited_paths(hotplug), std::vector{image.path()}) << "a closed image is not visited";
}

TEST_F(DiskHotplugTest, BadRequestsChangeNothing) {
    devices::block::testing::TempImage second{64 * 1024}, third{64 * 1024};
    hotplug.add({{"path", image.path()}});
    const json before = hotplug.query();
    EXPECT_THROW(hotplug.remove({{"id", "disk9"}}), std::invalid_argument);
    EXPECT_THROW(hotplug.remove({{"name", "disk0"}}), std::invalid_argument);
    EXPECT_THROW(hotplug.remove(json::object()), std::invalid_argument);
    EXPECT_THROW(hotplug.add({{"path", "/no/such/image"}}), std::runtime_error);
    EXPECT_THROW(hotplug.add(json::object()), std::invalid_argument);
    EXPECT_THROW(hotplug.add({{"path", image.path()}, {"colour", "red"}}), std::invalid_argument);
    EXPECT_THROW(hotplug.add({{"path", image.path()}, {"bus", "root"}}), std::invalid_argument);
    EXPECT_THROW(hotplug.add({{"path", image.path()}, {"controller", "c0"}}),
                 std::invalid_argument);
    EXPECT_THROW(hotplug.add({{"path", image.path()}}), std::runtime_error);  // in use already
    EXPECT_EQ(hotplug.query(), before);
    hotplug.add({{"path", second.path()}});
    EXPECT_THROW(hotplug.add({{"path", third.path()}}), std::runtime_error);  // no free port
}

// A SCSI controller with one LUN at start, given to DiskHotplug as the board gives it.
class LunHotplugTest : public ::testing::Test {
  protected:
    json disks() { return hotplug.query()["disks"]; }
    std::unique_ptr<devices::virtio::scsi::ScsiController> make_controller() {
        devices::virtio::scsi::ControllerConfig config;
        config.id = "c0";
        config.luns.push_back({boot_lun.path(), 0, false, "boot"});
        return std::make_unique<devices::virtio::scsi::ScsiController>(config, io);
    }

    devices::block::testing::TempImage boot_lun{64 * 1024}, image{64 * 1024};
    boost::asio::io_context io;
    devices::testing::PciHarness h;
    devices::virtio::testing::TestGuest guest{1 << 20};
    VcpuDiagnostics diagnostics{1};
    std::unique_ptr<devices::virtio::scsi::ScsiController> scsi = make_controller();
    DiskHotplug hotplug{{h.bridge, h.mmio, h.platform, guest.memory(), io, SlotSource::pool, 1,
                         diagnostics, [](std::chrono::seconds) {}},
                        {{"c0", "scsi c0", &scsi->counters(), {}, {}, 0, scsi.get()}}};
};

TEST_F(LunHotplugTest, ALunIsAddedListedAndRemovedAndItsImageCloses) {
    const size_t fds_before = open_fd_count();
    const json added = hotplug.add({{"path", image.path()}, {"controller", "c0"}});
    EXPECT_EQ(added, (json{{"id", "c0:0:1"}, {"controller", "c0"}, {"target", 0}, {"lun", 1}}))
        << "the lowest free LUN number";
    EXPECT_GT(open_fd_count(), fds_before);
    ASSERT_EQ(disks().size(), 3u) << "the controller, then its LUNs";
    EXPECT_EQ(disks()[0]["id"], "c0");
    EXPECT_EQ(disks()[1]["id"], "c0:0:0");
    EXPECT_EQ(disks()[1]["hotplugged"], false);
    EXPECT_EQ(disks()[2]["id"], "c0:0:1");
    EXPECT_EQ(disks()[2]["lun"], 1);
    EXPECT_EQ(disks()[2]["hotplugged"], true);
    EXPECT_EQ(visited_paths(hotplug), (std::vector{boot_lun.path(), image.path()}));
    ASSERT_NE(scsi->target(0)->find(1), nullptr);
    EXPECT_EQ(hotplug.remove({{"id", "c0:0:1"}}), (json{{"id", "c0:0:1"}, {"state", "closed"}}))
        << "no command held it";
    EXPECT_EQ(open_fd_count(), fds_before);
    EXPECT_EQ(disks().size(), 2u);
    EXPECT_EQ(hotplug.remove({{"id", "c0:0:0"}})["state"], "closed") << "a LUN of the start too";
    EXPECT_EQ(scsi->target(0), nullptr);
}

TEST_F(LunHotplugTest, BadRequestsChangeNothing) {
    const json before = hotplug.query();
    const size_t fds_before = open_fd_count();
    const auto lun = [&](json extra) {
        json arguments{{"path", image.path()}, {"controller", "c0"}};
        arguments.update(extra);
        return arguments;
    };
    EXPECT_THROW(hotplug.add(lun({{"lun", 0}})), std::invalid_argument) << "taken";
    EXPECT_THROW(hotplug.add(lun({{"target", 1}})), std::invalid_argument) << "past max_target";
    EXPECT_THROW(hotplug.add(lun({{"controller", "c9"}})), std::invalid_argument);
    EXPECT_THROW(hotplug.add(lun({{"serial", "boot"}})), std::invalid_argument);
    EXPECT_THROW(hotplug.add(lun({{"queues", 2}})), std::invalid_argument);
    EXPECT_THROW(hotplug.add(lun({{"path", "/no/such/image"}})), std::runtime_error);
    EXPECT_THROW(hotplug.remove({{"id", "c0:0:5"}}), std::invalid_argument);
    EXPECT_THROW(hotplug.remove({{"id", "c9:0:0"}}), std::invalid_argument);
    EXPECT_THROW(hotplug.remove({{"id", "c0:0:99999"}}), std::invalid_argument);
    EXPECT_EQ(hotplug.query(), before);
    EXPECT_EQ(open_fd_count(), fds_before);
}

}  // namespace
}  // namespace mvmm
