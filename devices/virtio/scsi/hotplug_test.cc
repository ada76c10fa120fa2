// LUNs added to and removed from a running controller (README.md, "Hot-plug"), through the
// device harness: the new LUN table, REPORT LUNS, the unit attention on the other LUNs, the
// events on the event queue, and a removed LUN's image kept open for its command in flight.
#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>

#include <boost/asio/post.hpp>

#include <atomic>
#include <future>
#include <thread>

#include "devices/block/gated_image.h"
#include "devices/virtio/scsi/controller_rig.h"

namespace mvmm::devices::virtio::scsi::testing {
namespace {

constexpr uint64_t kHotplug = 1ull << VIRTIO_SCSI_F_HOTPLUG;
constexpr uint8_t kTestUnitReady = 0x00, kRequestSense = 0x03;

class HotplugTest : public ControllerTest {
  protected:
    void SetUp() override {
        features = kFeatures | kHotplug;
        make(1, SlotSource::pool, kDefaultQueueSize, 16, second_target);
        ASSERT_TRUE(activate());
    }
    // `count` empty buffers on the event queue, as Linux's driver posts them.
    void post_event_buffers(int count) {
        for (int i = 0; i < count; ++i) {
            const GuestAddr buffer = guest.alloc(sizeof(virtio_scsi_event));
            const vt::TestDriver::Buffer chain[] = {
                {buffer, uint32_t(sizeof(virtio_scsi_event)), true}};
            drivers[1]->add_chain(chain);
            event_buffers.push_back(buffer);
        }
        kicks[1].signal();
    }
    // The `n`th event the device returned (the buffers are used in the order posted).
    virtio_scsi_event event(uint16_t n) {
        EXPECT_TRUE(vt::eventually([&] { return drivers[1]->used_idx() > n; }));
        EXPECT_EQ(drivers[1]->used(n).len, sizeof(virtio_scsi_event));
        virtio_scsi_event event{};
        const auto bytes = guest.read(event_buffers.at(n), sizeof event);
        std::memcpy(&event, bytes.data(), sizeof event);
        return event;
    }
    std::vector<uint8_t> report_luns(uint8_t target = 0) {
        const auto report =
            send(address(0, target), {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, {}, 256);
        wait_used(++commands);
        const auto header = guest.read(report.data, 4);
        return guest.read(report.data, 8 + load_be(header, 0, 4));
    }
    virtio_scsi_cmd_resp run(std::array<uint8_t, 8> lun, std::initializer_list<uint8_t> cdb,
                             uint32_t in = 0) {
        last = send(lun, cdb, {}, in);
        wait_used(++commands);
        return response_of(last);
    }
    LunConfig lun_config(uint16_t lun, uint8_t target = 0) {
        return {disk3.path(), lun, false, "added-" + std::to_string(lun), target};
    }

    bool second_target = false;
    std::vector<GuestAddr> event_buffers;
    uint16_t commands = 0;  // used on the request queue since activate()
    Sent last;
};

std::vector<uint8_t> lun_list(std::initializer_list<uint8_t> luns) {
    std::vector<uint8_t> list(8);
    list[3] = uint8_t(8 * luns.size());
    for (uint8_t lun : luns) list.insert(list.end(), {0, lun, 0, 0, 0, 0, 0, 0});
    return list;
}

TEST_F(HotplugTest, AnAddedLunIsAnnouncedListedAndServes) {
    post_event_buffers(2);
    EXPECT_EQ(report_luns(), lun_list({0, 3}));
    controller->add_lun(lun_config(5));
    const virtio_scsi_event rescan = event(0);
    EXPECT_EQ(rescan.event, uint32_t(VIRTIO_SCSI_T_TRANSPORT_RESET));
    EXPECT_EQ(rescan.reason, uint32_t(VIRTIO_SCSI_EVT_RESET_RESCAN));
    EXPECT_EQ(std::vector<uint8_t>(rescan.lun, rescan.lun + 8),
              (std::vector<uint8_t>{1, 0, 0, 5, 0, 0, 0, 0}))
        << "target 0, LUN 5 in peripheral addressing, as Linux reads it";
    EXPECT_EQ(report_luns(), lun_list({0, 3, 5}));
    const auto changed = run(address(0), {kTestUnitReady});
    EXPECT_EQ(changed.sense[2], 0x06) << "UNIT ATTENTION";
    EXPECT_EQ(changed.sense[12], 0x3f);
    EXPECT_EQ(changed.sense[13], 0x0e) << "REPORTED LUNS DATA HAS CHANGED on the other LUNs";
    EXPECT_EQ(run(address(5), {kRequestSense, 0, 0, 0, 18, 0}, 18).status, 0);
    EXPECT_EQ(guest.read(last.data, 18)[12], 0x29) << "the new LUN was just switched on";
    EXPECT_EQ(run(address(5), {0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0}, 512).status, 0);
    EXPECT_EQ(guest.read(last.data, 512), std::vector<uint8_t>(512, 0xcc));
}

TEST_F(HotplugTest, ABadChangeIsRefusedAndChangesNothing) {
    post_event_buffers(1);
    EXPECT_THROW(controller->add_lun(lun_config(3)), std::invalid_argument) << "LUN 3 is there";
    EXPECT_THROW(controller->add_lun(lun_config(1, 1)), std::invalid_argument)
        << "past max_target 0";
    LunConfig missing = lun_config(4);
    missing.path = "/nonexistent/image";
    EXPECT_THROW(controller->add_lun(missing), std::runtime_error);
    EXPECT_THROW(controller->remove_lun(0, 4), std::invalid_argument);
    EXPECT_EQ(report_luns(), lun_list({0, 3}));
    EXPECT_EQ(run(address(0), {kTestUnitReady}).status, 0) << "no unit attention";
    controller->add_lun(lun_config(4));
    EXPECT_EQ(event(0).lun[3], 4) << "the first event is the first good change's";
}

TEST_F(HotplugTest, TargetsComeAndGoBelowMaxTarget) {
    second_target = true;
    SetUp();
    post_event_buffers(2);
    controller->remove_lun(1, 3);
    EXPECT_EQ(event(0).reason, uint32_t(VIRTIO_SCSI_EVT_RESET_REMOVED));
    EXPECT_EQ(event(0).lun[1], 1) << "target 1";
    EXPECT_EQ(run(address(0, 1), {kTestUnitReady}).response, VIRTIO_SCSI_S_BAD_TARGET)
        << "a target with no LUN left is gone";
    controller->add_lun(lun_config(2, 1));
    EXPECT_EQ(event(1).reason, uint32_t(VIRTIO_SCSI_EVT_RESET_RESCAN));
    EXPECT_EQ(report_luns(1), lun_list({2}));
    virtio_scsi_config config{};
    controller->read_config(0, std::span(reinterpret_cast<uint8_t*>(&config), sizeof config));
    EXPECT_EQ(config.max_target, 1) << "fixed at start";
}

TEST_F(HotplugTest, TargetsReservesTargetsForLunsAddedLater) {
    ControllerConfig config{.id = "c1", .luns = {{disk3.path(), 0, false, "disk"}}, .targets = 4};
    ScsiController reserved(config, io);
    virtio_scsi_config space{};
    reserved.read_config(0, std::span(reinterpret_cast<uint8_t*>(&space), sizeof space));
    EXPECT_EQ(space.max_target, 3) << "targets 0 to 3, though only target 0 has a LUN";
    bt::TempImage image{64 * 1024};
    reserved.add_lun({image.path(), 5, false, "added", 3});
    ASSERT_NE(reserved.target(3), nullptr);
    EXPECT_NE(reserved.target(3)->find(5), nullptr);
    EXPECT_THROW(reserved.add_lun({image.path(), 6, false, "past", 4}), std::invalid_argument);
}

// Its image closes on the controller's closer thread: neither on the I/O thread that completed
// the command (it serves other LUNs) nor on the thread that removed it.
TEST_F(HotplugTest, ARemovedLunClosesOnlyAfterItsCommandInFlight) {
    post_event_buffers(1);
    std::atomic<std::thread::id> closed_on{};
    auto gated = std::make_unique<bt::GatedImage>();
    bt::GatedImage& gate = *gated;
    gate.on_close = [&] { closed_on = std::this_thread::get_id(); };
    auto lun = std::make_shared<Lun>(LunConfig{"gated", 7, true, "gated"}, std::move(gated));
    std::weak_ptr<const Lun> watched = lun;
    controller->add_lun(0, 7, std::move(lun));
    EXPECT_EQ(run(address(7), {kRequestSense, 0, 0, 0, 18, 0}, 18).status, 0);
    const auto read = send(address(7), {0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {}, 512);
    ASSERT_TRUE(gate.wait_inside(1));
    const auto removed = controller->remove_lun(0, 7);
    EXPECT_FALSE(removed.expired()) << "its command holds it";
    EXPECT_EQ(controller->target(0)->find(7), nullptr) << "it left the table at once";
    gate.open_gate();
    wait_used(++commands);
    EXPECT_EQ(response_of(read).status, 0) << "the command in flight completed";
    EXPECT_TRUE(vt::eventually([&] { return watched.expired() && removed.expired(); }))
        << "closed after it";
    std::promise<std::thread::id> io_thread_id;
    boost::asio::post(io, [&] { io_thread_id.set_value(std::this_thread::get_id()); });
    const std::thread::id io_thread_was = io_thread_id.get_future().get();
    EXPECT_NE(closed_on.load(), std::thread::id{});
    EXPECT_NE(closed_on.load(), io_thread_was) << "not on the I/O thread of its last command";
    EXPECT_NE(closed_on.load(), std::this_thread::get_id());
    EXPECT_EQ(run(address(7), {kTestUnitReady}).sense[12], 0x25) << "LOGICAL UNIT NOT SUPPORTED";
    EXPECT_EQ(event(0).reason, uint32_t(VIRTIO_SCSI_EVT_RESET_RESCAN));
}

TEST_F(HotplugTest, ARemovedLunNoCommandHoldsIsClosedWhenRemoveReturns) {
    bt::TempImage image{64 * 1024};
    controller->add_lun({image.path(), 5, false, "added"});
    EXPECT_TRUE(controller->remove_lun(0, 5).expired()) << "flushed and closed already";
    EXPECT_NO_THROW(controller->add_lun({image.path(), 6, false, "again"})) << "its lock is gone";
}

TEST_F(HotplugTest, EventsWaitForBuffersAndTheDriverLearnsOfThoseDropped) {
    auto lun = std::make_shared<Lun>(lun_config(5));
    controller->add_lun(0, 5, lun);  // kept until a buffer comes
    for (size_t kept = 1; kept + 2 < EventQueue::kMaxPending; kept += 2) {
        controller->remove_lun(0, 5);
        controller->add_lun(0, 5, lun);
    }
    controller->remove_lun(0, 5);    // the 64th event, the bound
    controller->add_lun(0, 5, lun);  // one past it: dropped
    post_event_buffers(2);
    const virtio_scsi_event first = event(0);
    EXPECT_EQ(first.event, uint32_t(VIRTIO_SCSI_T_TRANSPORT_RESET | VIRTIO_SCSI_T_EVENTS_MISSED))
        << "the next event says some were missed";
    EXPECT_EQ(first.reason, uint32_t(VIRTIO_SCSI_EVT_RESET_RESCAN)) << "the first one kept";
    EXPECT_EQ(event(1).event, uint32_t(VIRTIO_SCSI_T_TRANSPORT_RESET)) << "said once";
    EXPECT_EQ(event(1).reason, uint32_t(VIRTIO_SCSI_EVT_RESET_REMOVED));
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi::testing
