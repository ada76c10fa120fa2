// The virtio-scsi controller the SCSI fuzz targets drive: two targets on scratch images, its
// request queues on an io_context the fuzzer's thread polls, its control queue on its own
// thread.
#pragma once

#include <linux/virtio_scsi.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>

#include "base/fd.h"
#include "devices/virtio/scsi/controller.h"
#include "devices/virtio/test_queue_driver.h"
#include "fuzz_support.h"

namespace mvmm::fuzz {

class ScsiRig {
  public:
    static constexpr uint16_t kQueueSize = 64;
    static constexpr uint64_t kGuestBytes = 1 << 20;

    // The driver's config writes before DRIVER_OK: any values (a reset restores them).
    void set_layout(uint32_t cdb_size, uint32_t sense_size) {
        write_config(offsetof(virtio_scsi_config, cdb_size), cdb_size);
        write_config(offsetof(virtio_scsi_config, sense_size), sense_size);
    }
    // Queue 0 (control) and 2 (the first request queue) as the drivers set them up; the
    // event queue is not used.
    bool activate(devices::virtio::testing::TestGuest& guest,
                  const devices::virtio::QueueConfig& control,
                  const devices::virtio::QueueConfig& requests) {
        io.restart();
        return controller.activate(
            {guest.memory(),
             devices::virtio::kFeatureVersion1 | devices::virtio::kFeatureIndirectDesc,
             {control, {}, requests},
             {&kicks[0], &kicks[1], &kicks[2]},
             interrupt});
    }
    void kick(uint16_t queue) { kicks[queue].signal(); }

    boost::asio::io_context io;
    ScratchImage disk{1 << 20}, read_only_disk{1 << 20}, third_disk{1 << 20};
    devices::virtio::testing::FakeInterrupt interrupt;
    std::array<EventFd, 3> kicks;
    devices::virtio::scsi::ScsiController controller{config(), io};

  private:
    devices::virtio::scsi::ControllerConfig config() const {
        devices::virtio::scsi::ControllerConfig config;
        config.id = "fuzz";
        config.queue_size = kQueueSize;
        config.luns.push_back({disk.path(), 0, false, "disk"});
        config.luns.push_back({read_only_disk.path(), 1, true, "read-only", 0, 4096});
        config.luns.push_back({third_disk.path(), 0, false, "third", 3, 512, 4096});
        return config;
    }
    void write_config(size_t offset, uint32_t value) {
        controller.write_config(offset, bytes_of(value));
    }
};

}  // namespace mvmm::fuzz
