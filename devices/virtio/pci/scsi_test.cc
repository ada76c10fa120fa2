// virtio-scsi over virtio-pci behind PCIe root ports, without a vCPU: the test enumerates the
// bus like Linux, initializes each controller like virtio_pci_modern + virtio_scsi (config
// writes of cdb_size and sense_size, three queues with MSI-X), and sends commands through the
// rings and the notify area while an I/O thread runs the controllers.
#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>

#include <boost/asio/io_context.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "devices/block/temp_image.h"
#include "devices/pci/test_harness.h"
#include "devices/virtio/pci/test_pci_driver.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/scsi/big_endian.h"
#include "devices/virtio/scsi/controller.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::pci {
namespace {

namespace vt = ::mvmm::devices::virtio::testing;
namespace bt = ::mvmm::devices::block::testing;
namespace scsi = ::mvmm::devices::virtio::scsi;

constexpr uint64_t kWindow = 0xc000'0000;
constexpr uint16_t kLuns = 300;  // past 255: flat space addressing

struct Controller {
    std::vector<std::unique_ptr<bt::TempImage>> images;
    std::vector<std::unique_ptr<vt::TestDriver>> rings;  // control, event, request
    std::unique_ptr<testing::PciDriver> driver;
    const scsi::ScsiCounters* counters = nullptr;  // the controller's, which the function owns
};

class ScsiOverPciTest : public ::testing::Test {
  protected:
    void add_controller(uint16_t luns) {
        Controller controller;
        scsi::ControllerConfig config{
            .id = "c" + std::to_string(controllers.size()), .request_queues = 1, .luns = {}};
        for (uint16_t lun = 0; lun < luns; ++lun) {
            controller.images.push_back(std::make_unique<bt::TempImage>(4096, 0));
            config.luns.push_back(
                {controller.images.back()->path(), lun, false, "s" + std::to_string(lun), {}});
        }
        auto device = std::make_unique<scsi::ScsiController>(config, io);
        controller.counters = &device->counters();
        h.bridge.attach(
            std::make_shared<VirtioPciFunction>(std::move(device), h.platform, guest.memory()),
            devices::pci::NewRootPort{});
        controllers.push_back(std::move(controller));
    }

    // virtio_pci_modern's probe, then virtscsi_init: sizes, then the queues.
    void initialize(Controller& c) {
        c.driver->enable_msix(4);
        c.driver->negotiate(kFeatureVersion1 | kFeatureEventIdx);
        c.driver->set_device_config<uint32_t>(offsetof(virtio_scsi_config, cdb_size), 32);
        c.driver->set_device_config<uint32_t>(offsetof(virtio_scsi_config, sense_size), 96);
        c.driver->set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
        for (uint16_t q = 0; q < 3; ++q) {
            c.rings.push_back(std::make_unique<vt::TestDriver>(guest, 16));
            c.driver->setup_queue(q, c.rings[q]->config(), q + 1);
        }
        c.driver->set_status(testing::PciDriver::kDriverOkStatus);
    }

    // One command on the request queue; returns where its data-in (or data-out) lies.
    GuestAddr command(Controller& c, uint16_t lun, std::initializer_list<uint8_t> cdb,
                      std::span<const uint8_t> out, uint32_t in) {
        virtio_scsi_cmd_req header{};
        header.lun[0] = 1;
        header.lun[2] = uint8_t(0x40 | lun >> 8);
        header.lun[3] = uint8_t(lun);
        std::copy(cdb.begin(), cdb.end(), header.cdb);
        const GuestAddr request = guest.alloc(sizeof header);
        guest.write(request, std::span(reinterpret_cast<const uint8_t*>(&header), sizeof header));
        std::vector<vt::TestDriver::Buffer> chain{{request, uint32_t(sizeof header), false}};
        GuestAddr data;
        if (!out.empty()) {
            data = guest.alloc(out.size());
            guest.write(data, out);
            chain.push_back({data, uint32_t(out.size()), false});
        }
        responses.push_back(guest.alloc(sizeof(virtio_scsi_cmd_resp)));
        chain.push_back({responses.back(), uint32_t(sizeof(virtio_scsi_cmd_resp)), true});
        if (in) {
            data = guest.alloc(in);
            chain.push_back({data, in, true});
        }
        c.rings[2]->add_chain(chain);
        c.driver->kick(2);
        return data;
    }

    // TEST UNIT READY as a LUN's first command after power on: the unit attention, CHECK
    // CONDITION (SAM-5, 5.14), and the LUN runs the next command.  `used` is the ring's count
    // after it.
    void take_unit_attention(Controller& c, uint16_t lun, uint16_t used) {
        command(c, lun, {0, 0, 0, 0, 0, 0}, {}, 0);
        const GuestAddr response = responses.back();
        responses.pop_back();
        ASSERT_TRUE(vt::eventually([&] { return c.rings[2]->used_idx() == used; }));
        EXPECT_EQ(guest.read(response, 12)[10], 2) << "CHECK CONDITION: power on";
    }

    boost::asio::io_context io;
    vt::IoThread io_thread{io};
    vt::TestGuest guest{8 << 20};
    devices::testing::PciHarness h;
    std::vector<Controller> controllers;
    std::vector<GuestAddr> responses;
};

TEST_F(ScsiOverPciTest, TwoControllersAndThreeHundredLunsBehindRootPorts) {
    add_controller(kLuns);
    add_controller(2);
    auto drivers = testing::enumerate_root_ports(h, kWindow);
    ASSERT_EQ(drivers.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        controllers[i].driver = std::move(drivers[i]);
        EXPECT_EQ(h.ecam_read<uint16_t>({uint8_t(i + 1), 0, 0}, 2), 0x1048) << "virtio-scsi";
        initialize(controllers[i]);
        ASSERT_EQ(controllers[i].driver->status(), testing::PciDriver::kDriverOkStatus);
        EXPECT_EQ(
            controllers[i].driver->device_config<uint32_t>(offsetof(virtio_scsi_config, max_lun)),
            scsi::kMaxLun);
    }
    Controller& big = controllers[0];
    const GuestAddr luns = command(big, 0, {0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, {}, 4096);
    const auto pattern = bt::pattern(512, 42);
    take_unit_attention(big, kLuns - 1, 2);  // REPORT LUNS reports none
    take_unit_attention(controllers[1], 1, 1);
    command(big, kLuns - 1, {0x2a, 0, 0, 0, 0, 3, 0, 0, 1, 0}, pattern, 0);
    command(controllers[1], 1, {0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0}, pattern, 0);
    ASSERT_TRUE(vt::eventually([&] { return big.rings[2]->used_idx() == 3; }));
    ASSERT_TRUE(vt::eventually([&] { return controllers[1].rings[2]->used_idx() == 2; }));

    const auto list = guest.read(luns, 8 + 8 * kLuns);
    EXPECT_EQ(scsi::load_be(list, 0, 4), 8u * kLuns);
    EXPECT_EQ(scsi::load_be(list, 8 + 8 * 299, 2), 0x4000u | 299);
    for (GuestAddr response : responses) EXPECT_EQ(guest.read(response, 12)[10], 0) << "status";
    EXPECT_EQ(big.images[kLuns - 1]->read(3 * 512, 512), pattern);
    EXPECT_EQ(controllers[1].images[1]->read(0, 512), pattern);
    EXPECT_GE(h.platform.vectors.at(3)->triggers, 1u) << "controller 0's request queue vector";
}

TEST_F(ScsiOverPciTest, StatisticsShowTheQueuesWithWorkersAndTheFirstNotify) {
    add_controller(1);
    Controller& c = controllers[0];
    c.driver = std::move(testing::enumerate_root_ports(h, kWindow).at(0));
    EXPECT_FALSE(c.counters->statistics().driver_ok);
    initialize(c);
    const auto started = c.counters->statistics();
    EXPECT_TRUE(started.driver_ok);
    EXPECT_FALSE(started.first_notify);
    // The event queue and the request queue; the control queue runs on a thread of its own,
    // whose counters the device's statistics do not show yet.
    ASSERT_EQ(started.queues.size(), 2u);
    EXPECT_EQ(started.queues[0].queue, scsi::ScsiController::kEventQueue);
    EXPECT_EQ(started.queues[1].queue, scsi::ScsiController::kFirstRequestQueue);

    command(c, 0, {0x12, 0, 0, 0, 36, 0}, {}, 36);  // INQUIRY
    ASSERT_TRUE(vt::eventually([&] { return c.rings[2]->used_idx() == 1; }));
    // The kick wakes the worker, whether or not the drain at activation served the command.
    ASSERT_TRUE(vt::eventually([&] { return c.counters->statistics().first_notify.has_value(); }));
    const auto served = c.counters->statistics();
    EXPECT_GE(*served.first_notify, *started.driver_ok);
    for (const auto& queue : served.queues) {
        EXPECT_EQ(queue.slots, 16u);
        EXPECT_EQ(queue.request_alloc, SlotSource::pool);
        EXPECT_FALSE(queue.heap_allocations);
    }
    EXPECT_EQ(served.queues[1].peak_slots_in_use, 1u);
    EXPECT_GT(served.queues[1].pool_resident_bytes, 0u);
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
