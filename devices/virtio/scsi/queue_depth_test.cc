// A virtio-scsi request queue's depth reaches the host: the guest's READs are in the image at
// once, not one after another (as they were when each command blocked its queue), and task
// management still waits for the commands in flight.
#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>

#include "devices/block/gated_image.h"
#include "devices/virtio/scsi/controller_rig.h"

namespace mvmm::devices::virtio::scsi::testing {
namespace {

constexpr uint16_t kGatedLun = 1;
constexpr int kReads = 8;

class ScsiQueueDepthTest : public ControllerTest {
  protected:
    // Rings of 32 descriptors: room for every read's 3 at once.
    void SetUp() override {
        make(1, SlotSource::pool, kDefaultQueueSize, 32);
        ASSERT_TRUE(activate());
    }
    // A failed test leaves no read waiting: the controller's reset waits for them.
    void TearDown() override {
        if (gated) gated->open_gate();
    }
    // A LUN on a gated image (its reads wait until the test opens the gate), its unit
    // attention taken.
    void add_gated_lun(block::AioMode aio) {
        auto image = std::make_unique<bt::GatedImage>();
        gated = image.get();
        LunConfig config{.path = "gated", .lun = kGatedLun, .read_only = true, .serial = "gated"};
        config.aio = aio;
        controller->add_lun(0, kGatedLun, std::make_shared<Lun>(config, std::move(image)));
        send(address(kGatedLun), {0x03, 0, 0, 0, 18, 0}, {}, 18);
        wait_used(++commands);
    }
    // kReads one-block READ(10)s of the gated LUN, kicked together; every second block, so
    // that no two are merged into one host read.
    std::vector<Sent> send_reads() {
        std::vector<Sent> reads;
        for (uint8_t i = 0; i < kReads; ++i)
            reads.push_back(send(address(kGatedLun), {0x28, 0, 0, 0, 0, uint8_t(2 * i), 0, 0, 1, 0},
                                 {}, 512, 2, 100 + i, i + 1 == kReads));
        return reads;
    }

    bt::GatedImage* gated = nullptr;  // owned by its LUN
    uint16_t commands = 0;            // used on the request queue since activate()
};

TEST_F(ScsiQueueDepthTest, EveryReadOfTheRingIsInTheImageAtOnce) {
    add_gated_lun(block::AioMode::Threads);
    const auto reads = send_reads();
    EXPECT_TRUE(gated->wait_inside(kReads)) << "the reads were not in the image side by side";
    gated->open_gate();
    wait_used(commands + kReads);
    for (const Sent& read : reads) {
        EXPECT_EQ(response_of(read).response, VIRTIO_SCSI_S_OK);
        EXPECT_EQ(response_of(read).status, 0);
        EXPECT_EQ(response_of(read).resid, 0u);
    }
}

// A LUN reset covers the reads in flight: it answers only once they are back, and they ran.
TEST_F(ScsiQueueDepthTest, ALunResetWaitsForTheCommandsInFlight) {
    add_gated_lun(block::AioMode::Threads);
    const auto reads = send_reads();
    ASSERT_TRUE(gated->wait_inside(kReads));
    const GuestAddr reset = tmf(VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, address(kGatedLun));
    wait_for_tmf();
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(drivers[0]->used_idx(), 0) << "the TMF answered with reads in flight";
    EXPECT_EQ(used_since_activation(2), commands);
    gated->open_gate();
    wait_used(1, 0);
    EXPECT_EQ(used_since_activation(2), commands + kReads) << "every read is back first";
    EXPECT_EQ(guest.read(reset, 1)[0], VIRTIO_SCSI_S_OK);
    for (const Sent& read : reads) EXPECT_EQ(response_of(read).response, VIRTIO_SCSI_S_OK);
}

// A command in flight is in the task set: QUERY TASK finds it, once it is back.
TEST_F(ScsiQueueDepthTest, QueryTaskFindsACommandInFlight) {
    add_gated_lun(block::AioMode::Threads);
    send_reads();
    ASSERT_TRUE(gated->wait_inside(kReads));
    const GuestAddr query = tmf(VIRTIO_SCSI_T_TMF_QUERY_TASK, address(kGatedLun), 103);
    wait_for_tmf();
    gated->open_gate();
    wait_used(1, 0);
    EXPECT_EQ(guest.read(query, 1)[0], VIRTIO_SCSI_S_FUNCTION_SUCCEEDED);
    EXPECT_EQ(used_since_activation(2), commands + kReads);
}

// A reset of the device waits for the commands in flight (QueueWorkers::stop()).
TEST_F(ScsiQueueDepthTest, AResetWaitsForTheCommandsInFlight) {
    add_gated_lun(block::AioMode::Threads);
    send_reads();
    ASSERT_TRUE(gated->wait_inside(kReads));
    std::jthread opener([&] {
        std::this_thread::sleep_for(50ms);
        gated->open_gate();
    });
    controller->reset();
    EXPECT_EQ(used_since_activation(2), commands + kReads);
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi::testing
