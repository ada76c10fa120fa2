// A virtio-scsi controller (virtio 1.2, 5.6): one target whose LUNs are raw images, a control
// queue, an event queue and N request queues.  The request queues run on the I/O threads
// through the shared queue workers (../queue_worker.h), as virtio-blk's do; each command is
// framed (request.h), addressed, parsed (cdb.h) and run on its LUN (target.h) before its
// response goes back.  See README.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <shared_mutex>
#include <string>
#include <vector>

#include "devices/virtio/queue_worker.h"
#include "devices/virtio/scsi/config.h"
#include "devices/virtio/scsi/control.h"
#include "devices/virtio/scsi/request.h"
#include "devices/virtio/scsi/target.h"
#include "devices/virtio/virtio_device.h"

namespace boost::asio {
class io_context;
}

namespace mvmm::devices::virtio::scsi {

// Per-controller counters, readable from any thread: the queue workers' and the commands'.
struct ScsiCounters : QueueCounters {
    std::atomic<uint64_t> bad_requests{0};      // unparsable framing: VIRTIO_SCSI_S_FAILURE
    std::atomic<uint64_t> bad_targets{0};       // another target: VIRTIO_SCSI_S_BAD_TARGET
    std::atomic<uint64_t> overruns{0};          // buffers that do not fit the CDB
    std::atomic<uint64_t> check_conditions{0};  // commands that failed with sense
};

class ScsiController final : public Device {
  public:
    static constexpr uint16_t kControlQueue = 0, kEventQueue = 1, kFirstRequestQueue = 2;

    // Opens every LUN (Target); throws block::ImageError or std::invalid_argument for the
    // user.  `io` must outlive the controller.
    ScsiController(const ControllerConfig& config, boost::asio::io_context& io);

    uint32_t device_id() const override { return 8; }
    uint64_t features() const override;
    uint16_t num_queues() const override { return kFirstRequestQueue + request_queues_; }
    uint16_t max_queue_size() const override { return queue_size_; }
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    // Only sense_size and cdb_size are writable.
    void write_config(uint64_t offset, std::span<const uint8_t> data) override;
    bool activate(ActivateContext context) override;
    // Waits for the commands in flight (QueueWorkers::stop); never from an I/O thread.
    void reset() override;
    bool needs_reset() const override { return counters_.needs_reset.load(); }

    const ScsiCounters& counters() const noexcept { return counters_; }
    const Target& target() const noexcept { return target_; }

  private:
    // The request queues' handler: framing, addressing, the target, the response.
    class Commands final : public RequestHandler {
      public:
        Commands(Target& target, std::shared_mutex& in_flight, ScsiCounters& counters)
            : target_(target), in_flight_(in_flight), counters_(counters) {}
        uint32_t handle(const DescriptorChain& chain) override;

        Layout layout;  // set by activate() while no worker runs

      private:
        Target& target_;
        std::shared_mutex& in_flight_;
        ScsiCounters& counters_;
    };

    std::vector<uint8_t> config_space() const;

    const uint16_t request_queues_;
    const uint16_t queue_size_;
    ScsiCounters counters_;
    std::shared_mutex in_flight_;  // shared by each command while it runs, taken by TMFs
    Target target_;
    Commands commands_;
    ControlHandler control_;
    std::atomic<uint32_t> cdb_size_;
    std::atomic<uint32_t> sense_size_;
    QueueWorkers workers_;
};

}  // namespace mvmm::devices::virtio::scsi
