// The device harness (controller_rig.h) on the controller's fixed LUNs.
#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>
#include <unistd.h>

#include "devices/virtio/scsi/controller_rig.h"

namespace mvmm::devices::virtio::scsi::testing {
namespace {

TEST_F(ControllerTest, ConfigSpaceSaysOneTargetManyLuns) {
    virtio_scsi_config config{};
    controller->read_config(0, std::span(reinterpret_cast<uint8_t*>(&config), sizeof config));
    EXPECT_EQ(config.num_queues, 1u);
    EXPECT_EQ(config.max_target, 0) << "Linux scans one target with REPORT LUNS";
    EXPECT_EQ(config.max_lun, kMaxLun);
    EXPECT_EQ(config.seg_max, kDefaultQueueSize - 2u);
    EXPECT_EQ(controller->max_queue_size(), kDefaultQueueSize);
    EXPECT_EQ(config.cdb_size, 32u);
    EXPECT_EQ(config.sense_size, 96u);
    EXPECT_EQ(controller->device_id(), 8u);
    EXPECT_EQ(controller->num_queues(), 3);
    EXPECT_TRUE(controller->features() & (1ull << VIRTIO_SCSI_F_HOTPLUG));
    EXPECT_FALSE(controller->features() & (1ull << VIRTIO_SCSI_F_CHANGE));
}

TEST_F(ControllerTest, TheDriverSetsCdbAndSenseSizesAndAResetRestoresThem) {
    const uint32_t sense = 32;
    controller->write_config(offsetof(virtio_scsi_config, sense_size),
                             std::span(reinterpret_cast<const uint8_t*>(&sense), 4));
    const uint32_t max_lun = 5;
    controller->write_config(offsetof(virtio_scsi_config, max_lun),
                             std::span(reinterpret_cast<const uint8_t*>(&max_lun), 4));
    virtio_scsi_config config{};
    controller->read_config(0, std::span(reinterpret_cast<uint8_t*>(&config), sizeof config));
    EXPECT_EQ(config.sense_size, 32u);
    EXPECT_EQ(config.max_lun, kMaxLun) << "read-only";
    controller->reset();
    controller->read_config(0, std::span(reinterpret_cast<uint8_t*>(&config), sizeof config));
    EXPECT_EQ(config.sense_size, 96u);
}

TEST_F(ControllerTest, WritesAndReadsThroughTheRequestQueue) {
    const auto data = bt::pattern(1024, 7);
    const auto write = send(address(0), {0x2a, 0, 0, 0, 0, 2, 0, 0, 2, 0}, data);
    wait_used(1);
    EXPECT_EQ(response_of(write).response, VIRTIO_SCSI_S_OK);
    EXPECT_EQ(response_of(write).status, 0);
    EXPECT_EQ(disk.read(2 * 512, 1024), data);
    const auto read = send(address(0), {0x28, 0, 0, 0, 0, 2, 0, 0, 2, 0}, {}, 1536);
    wait_used(2);
    EXPECT_EQ(response_of(read).resid, 512u) << "1024 of 1536 bytes moved";
    EXPECT_EQ(guest.read(read.data, 1024), data);
    EXPECT_EQ(drivers[2]->used(base[2] + 1).len, sizeof(virtio_scsi_cmd_resp) + 1024);
    EXPECT_GE(interrupt.queue_notifications.load(), 1);
}

TEST_F(ControllerTest, ScanningFindsEveryLunWithoutTouchingAnImage) {
    const auto report = send(address(0), {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, {}, 256);
    const auto capacity = send(address(3), {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {}, 8);
    const auto nothing = send(address(1), {0x12, 0, 0, 0, 36, 0}, {}, 36);
    wait_used(3);
    auto luns = guest.read(report.data, 24);
    EXPECT_EQ(load_be(luns, 0, 4), 16u);
    EXPECT_EQ(luns[17], 3);
    EXPECT_EQ(load_be(guest.read(capacity.data, 4), 0, 4), 7u);
    EXPECT_EQ(guest.read(nothing.data, 1)[0], 0x7f);
}

TEST_F(ControllerTest, ErrorsReachTheGuestAsResponsesAndSense) {
    const auto protected_write =
        send(address(3), {0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0}, std::vector<uint8_t>(512, 1));
    const auto other_target = send(address(0, 1), {0x00});
    const auto overrun = send(address(0), {0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0}, {}, 512);
    wait_used(3);
    EXPECT_EQ(response_of(protected_write).status, 2);
    EXPECT_EQ(response_of(protected_write).sense[2], 0x07) << "DATA PROTECT";
    EXPECT_EQ(response_of(other_target).response, VIRTIO_SCSI_S_BAD_TARGET);
    EXPECT_EQ(response_of(overrun).response, VIRTIO_SCSI_S_OVERRUN);
    EXPECT_EQ(disk2.read(0, 512), std::vector<uint8_t>(512, 0xbb));
    EXPECT_EQ(controller->counters().check_conditions.load(), 1u);
    EXPECT_EQ(controller->counters().bad_targets.load(), 1u);
    EXPECT_EQ(controller->counters().overruns.load(), 1u);
    EXPECT_FALSE(controller->needs_reset());
}

TEST_F(ControllerTest, ABadlyFramedRequestFailsAloneAndTheQueueGoesOn) {
    const GuestAddr header = guest.alloc(8), response = guest.alloc(sizeof(virtio_scsi_cmd_resp));
    const vt::TestDriver::Buffer short_header[] = {
        {header, 8, false}, {response, uint32_t(sizeof(virtio_scsi_cmd_resp)), true}};
    drivers[2]->add_chain(short_header);
    const auto good = send(address(0), {0x00});
    wait_used(2);
    EXPECT_EQ(guest.read(response, 12)[11], VIRTIO_SCSI_S_FAILURE);
    EXPECT_EQ(response_of(good).response, VIRTIO_SCSI_S_OK);
    EXPECT_EQ(controller->counters().bad_requests.load(), 1u);
}

// The control queue: what each task management function answers.
TEST_F(ControllerTest, TaskManagementAndNotificationQueriesAreAnswered) {
    const GuestAddr reset = tmf(VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, address(0));
    const GuestAddr abort_missing = tmf(VIRTIO_SCSI_T_TMF_ABORT_TASK, address(9));
    const GuestAddr bad_target = tmf(VIRTIO_SCSI_T_TMF_ABORT_TASK, address(0, 2));
    const GuestAddr aca = tmf(VIRTIO_SCSI_T_TMF_CLEAR_ACA, address(0));
    const GuestAddr query = tmf(VIRTIO_SCSI_T_TMF_QUERY_TASK_SET, address(0));
    const GuestAddr nexus = tmf(VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET, address(3));
    virtio_scsi_ctrl_an_req notification{};
    notification.type = VIRTIO_SCSI_T_AN_QUERY;
    notification.event_requested = 0xff;
    const GuestAddr an = control(notification, sizeof(virtio_scsi_ctrl_an_resp));
    wait_used(7, 0);
    EXPECT_EQ(guest.read(reset, 1)[0], VIRTIO_SCSI_S_OK) << "FUNCTION COMPLETE";
    EXPECT_EQ(guest.read(abort_missing, 1)[0], VIRTIO_SCSI_S_INCORRECT_LUN);
    EXPECT_EQ(guest.read(bad_target, 1)[0], VIRTIO_SCSI_S_BAD_TARGET);
    EXPECT_EQ(guest.read(aca, 1)[0], VIRTIO_SCSI_S_FUNCTION_REJECTED);
    EXPECT_EQ(guest.read(query, 1)[0], VIRTIO_SCSI_S_OK) << "no task queued: COMPLETE";
    EXPECT_EQ(guest.read(nexus, 1)[0], VIRTIO_SCSI_S_OK);
    const auto an_response = guest.read(an, 5);
    EXPECT_EQ(load_be(an_response, 0, 4), 0u) << "no events supported";
    EXPECT_EQ(an_response[4], VIRTIO_SCSI_S_OK);
}

// A LUN reset answers the commands of that LUN still in the ring RESET, without running them,
// and completes only after every command queued before it is back with the driver.
TEST_F(ControllerTest, ALunResetCancelsTheQueuedCommandsOfItsLunBeforeItCompletes) {
    const auto data = std::vector<uint8_t>(512, 0x5a);
    const auto write = send(address(0), {0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0}, data, 0, 2, 1, false);
    const auto read = send(address(0), {0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0}, {}, 512, 2, 2, false);
    const auto other = send(address(3), {0x00}, {}, 0, 2, 3, false);
    const GuestAddr reset = tmf(VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, address(0));
    wait_for_tmf();
    EXPECT_EQ(drivers[0]->used_idx(), 0) << "the TMF waits for the commands queued before it";
    kicks[2].signal();  // the request queue runs them now
    wait_used(1, 0);
    EXPECT_EQ(used_since_activation(2), 3) << "every command queued before the TMF is back";
    EXPECT_EQ(guest.read(reset, 1)[0], VIRTIO_SCSI_S_OK);
    EXPECT_EQ(response_of(write).response, VIRTIO_SCSI_S_RESET);
    EXPECT_EQ(response_of(write).resid, 512u) << "nothing moved";
    EXPECT_EQ(response_of(read).response, VIRTIO_SCSI_S_RESET);
    EXPECT_EQ(response_of(other).response, VIRTIO_SCSI_S_OK) << "another LUN's command ran";
    EXPECT_EQ(disk.read(512, 512), std::vector<uint8_t>(512, 0xaa)) << "the write never ran";
    EXPECT_EQ(controller->counters().aborted.load(), 2u);

    const auto after = send(address(0), {0x00});
    const auto again = send(address(0), {0x00});
    wait_used(5);
    EXPECT_EQ(response_of(after).sense[12], 0x29) << "POWER ON, RESET, OR BUS DEVICE RESET";
    EXPECT_EQ(response_of(again).status, 0) << "once";
}

TEST_F(ControllerTest, AbortTaskCancelsOneTaskAndQueryTaskTellsTheTruth) {
    const auto first = send(address(0), {0x00}, {}, 0, 2, 10, false);
    const auto aborted = send(address(0), {0x00}, {}, 0, 2, 11, false);
    const auto queried = send(address(0), {0x00}, {}, 0, 2, 12, false);
    const GuestAddr abort = tmf(VIRTIO_SCSI_T_TMF_ABORT_TASK, address(0), 11);
    wait_for_tmf();
    kicks[2].signal();
    wait_used(1, 0);
    EXPECT_EQ(used_since_activation(2), 3);
    EXPECT_EQ(guest.read(abort, 1)[0], VIRTIO_SCSI_S_OK);
    EXPECT_EQ(response_of(first).response, VIRTIO_SCSI_S_OK);
    EXPECT_EQ(response_of(aborted).response, VIRTIO_SCSI_S_ABORTED);
    EXPECT_EQ(response_of(queried).response, VIRTIO_SCSI_S_OK);

    send(address(0), {0x00}, {}, 0, 2, 20, false);
    const GuestAddr present = tmf(VIRTIO_SCSI_T_TMF_QUERY_TASK, address(0), 20);
    wait_for_tmf();
    kicks[2].signal();
    wait_used(1 + 1, 0);
    EXPECT_EQ(guest.read(present, 1)[0], VIRTIO_SCSI_S_FUNCTION_SUCCEEDED) << "it was queued";
    const GuestAddr gone = tmf(VIRTIO_SCSI_T_TMF_QUERY_TASK, address(0), 20);
    wait_used(3, 0);
    EXPECT_EQ(guest.read(gone, 1)[0], VIRTIO_SCSI_S_OK) << "complete: no such task any more";
    EXPECT_EQ(used_since_activation(2), 4);
}

TEST_F(ControllerTest, AResetWakesATmfWaitingForAQueueThatIsNeverKicked) {
    send(address(0), {0x00}, {}, 0, 2, 1, false);
    tmf(VIRTIO_SCSI_T_TMF_ABORT_TASK_SET, address(0));
    wait_for_tmf();
    controller->reset();  // returns: the TMF stopped waiting
    EXPECT_FALSE(controller->needs_reset());
}

TEST_F(ControllerTest, TargetsHaveTheirOwnLuns) {
    make(1, SlotSource::pool, kDefaultQueueSize, 16, true);
    ASSERT_TRUE(activate());
    virtio_scsi_config config{};
    controller->read_config(0, std::span(reinterpret_cast<uint8_t*>(&config), sizeof config));
    EXPECT_EQ(config.max_target, 1) << "the highest target given";
    const auto take_attention = send(address(3, 1), {0x00});
    const auto report = send(address(0, 1), {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}, {}, 256);
    const auto read = send(address(3, 1), {0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, {}, 512);
    const auto absent = send(address(0, 2), {0x00});
    wait_used(4);
    EXPECT_EQ(response_of(take_attention).sense[12], 0x29);
    EXPECT_EQ(load_be(guest.read(report.data, 4), 0, 4), 8u) << "target 1 has one LUN";
    EXPECT_EQ(guest.read(report.data, 24)[9], 3);
    EXPECT_EQ(guest.read(read.data, 512), std::vector<uint8_t>(512, 0xcc));
    EXPECT_EQ(response_of(absent).response, VIRTIO_SCSI_S_BAD_TARGET);
    const GuestAddr nexus = tmf(VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET, address(0, 1));
    wait_used(1, 0);
    EXPECT_EQ(guest.read(nexus, 1)[0], VIRTIO_SCSI_S_OK);
    const auto after_nexus = send(address(3, 1), {0x00});
    const auto target0 = send(address(0), {0x00});
    wait_used(6);
    EXPECT_EQ(response_of(after_nexus).sense[12], 0x29) << "the target's LUNs were reset";
    EXPECT_EQ(response_of(target0).status, 0) << "target 0's were not";
}

TEST_F(ControllerTest, AGrownImageIsReportedAsACapacityChange) {
    ASSERT_EQ(::truncate(disk.path().c_str(), 128 * 512), 0);
    EXPECT_EQ(controller->reread_capacity(0, 0), 128u * 512);
    EXPECT_THROW(controller->reread_capacity(1, 0), std::invalid_argument);
    const auto attention = send(address(0), {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {}, 8);
    const auto capacity = send(address(0), {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {}, 8);
    wait_used(2);
    EXPECT_EQ(response_of(attention).sense[2], 0x06) << "UNIT ATTENTION";
    EXPECT_EQ(response_of(attention).sense[12], 0x2a);
    EXPECT_EQ(response_of(attention).sense[13], 0x09) << "CAPACITY DATA HAS CHANGED";
    EXPECT_EQ(load_be(guest.read(capacity.data, 4), 0, 4), 127u);
}

TEST_F(ControllerTest, EventBuffersStayWithTheDevice) {
    const GuestAddr event = guest.alloc(sizeof(virtio_scsi_event));
    const vt::TestDriver::Buffer chain[] = {{event, uint32_t(sizeof(virtio_scsi_event)), true}};
    drivers[1]->add_chain(chain);
    kicks[1].signal();
    send(address(0), {0x00});
    wait_used(1);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(drivers[1]->used_idx(), 0) << "no event to report";
}

TEST_F(ControllerTest, CommandsFromTheHeapServeAsPooledOnesDo) {
    for (SlotSource request_alloc : {SlotSource::malloc, SlotSource::calloc}) {
        make(1, request_alloc);
        ASSERT_TRUE(activate());
        const auto data = bt::pattern(512, uint8_t(request_alloc));
        send(address(0), {0x2a, 0, 0, 0, 0, 5, 0, 0, 1, 0}, data);
        wait_used(1);  // commands in flight complete in any order
        const auto read = send(address(0), {0x28, 0, 0, 0, 0, 5, 0, 0, 1, 0}, {}, 512);
        wait_used(2);
        EXPECT_EQ(response_of(read).status, 0) << to_string(request_alloc);
        EXPECT_EQ(guest.read(read.data, 512), data) << to_string(request_alloc);
    }
}

TEST_F(ControllerTest, EveryRequestQueueServes) {
    make(4);
    ASSERT_TRUE(activate());
    for (size_t queue = 2; queue < 6; ++queue) send(address(0), {0x00}, {}, 0, queue);
    for (size_t queue = 2; queue < 6; ++queue) wait_used(1, queue);
}

// queue-size=64: every queue's maximum, and the command slots of each queue's pool.
TEST_F(ControllerTest, QueueSizeBoundsEveryRingAndItsCommandSlots) {
    make(2, SlotSource::pool, 64, 128);
    EXPECT_EQ(controller->max_queue_size(), 64);
    virtio_scsi_config config{};
    controller->read_config(0, std::span(reinterpret_cast<uint8_t*>(&config), sizeof config));
    EXPECT_EQ(config.seg_max, 62u) << "the request and response headers";
    EXPECT_FALSE(activate()) << "a ring larger than queue-size";

    make(2, SlotSource::pool, 64, 64);
    ASSERT_TRUE(activate());
    // Every descriptor of the ring in use: 32 commands of two each.
    std::vector<Sent> sent;
    for (int i = 0; i < 32; ++i) sent.push_back(send(address(0), {0x00}, {}, 0, 3));
    wait_used(32, 3);
    for (const auto& command : sent) EXPECT_EQ(response_of(command).response, VIRTIO_SCSI_S_OK);
    EXPECT_FALSE(controller->needs_reset());
}

TEST_F(ControllerTest, RefusesABadQueueSize) {
    for (uint16_t size : {0, 2, 3, 96, 2048})
        EXPECT_THROW(make(1, SlotSource::pool, size), std::invalid_argument) << size;
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi::testing
