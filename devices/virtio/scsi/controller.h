// A virtio-scsi controller (virtio 1.2, 5.6): up to 256 targets whose LUNs are disk images, a
// control queue, an event queue and N request queues.  The request queues run on the I/O
// threads through the shared queue workers (../queue_worker.h), as virtio-blk's do, many
// commands in flight per queue (command_queue.h).  The control queue runs on a thread of the
// controller's own, since a TMF waits there for the request queues.  LUNs come and go while
// commands run: the targets are an immutable snapshot (TargetTable) that each command holds until
// it completes, and the event queue (events.h) tells the driver.  See README.md.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "devices/virtio/queue_worker.h"
#include "devices/virtio/scsi/command_queue.h"
#include "devices/virtio/scsi/config.h"
#include "devices/virtio/scsi/control.h"
#include "devices/virtio/scsi/events.h"
#include "devices/virtio/scsi/request.h"
#include "devices/virtio/scsi/target.h"
#include "devices/virtio/scsi/task_set.h"
#include "devices/virtio/virtio_device.h"

namespace mvmm::devices::virtio::scsi {

class ScsiController final : public Device {
  public:
    static constexpr uint16_t kControlQueue = 0, kEventQueue = 1, kFirstRequestQueue = 2;

    // Opens every LUN (Target); throws block::ImageError or std::invalid_argument for the
    // user.  `io` must outlive the controller.
    ScsiController(const ControllerConfig& config, boost::asio::io_context& io);
    // Stops the queues, a TMF waiting for them first, and the control queue's thread.
    ~ScsiController() override;

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
    bool needs_reset() const override {
        return counters_.needs_reset.load() || control_counters_.needs_reset.load();
    }

    const ScsiCounters& counters() const noexcept { return counters_; }
    // Whether a task management function is waiting for the request queues.
    bool task_function_waiting() const noexcept { return tasks_.applying(); }
    // The target `number` as it is now, or nullptr.
    std::shared_ptr<const Target> target(uint8_t number) const;
    // Calls `visit` with every LUN present now, by target and LUN number; they stay open
    // until it returns.
    void for_each_lun(
        const std::function<void(uint8_t target, uint16_t lun, Lun& disk)>& visit) const;
    uint8_t max_target() const noexcept { return max_target_; }

    // Hot-plug (README.md, "Hot-plug").  Opens `config`'s image and adds it at
    // config.target/config.lun: a new target is created when it has none, up to max_target()
    // (fixed at start: the driver read it).  Throws std::invalid_argument (a target past
    // max_target(), a LUN present) or block::ImageError, and changes nothing.  (vmm checks
    // that serials differ.)
    void add_lun(const LunConfig& config);
    // The same with a Lun made already (a test's gated image).
    void add_lun(uint8_t target, uint16_t lun, std::shared_ptr<Lun> disk);
    // Takes the LUN out of the table at once.  Its image is flushed and closed here when no
    // command holds the LUN, else on the controller's closer thread once the last one completes
    // (the weak pointer then expires).  Throws std::invalid_argument when there is none.
    std::weak_ptr<const void> remove_lun(uint8_t target, uint16_t lun);

    // Re-reads the image size of the LUN at `target`/`lun` (after the host resized it) and,
    // when it changed, reports CAPACITY DATA HAS CHANGED to the guest's next command there.
    // Returns the new size in bytes; throws std::invalid_argument for a LUN that does not
    // exist and std::runtime_error for an image that no longer holds whole blocks.
    uint64_t reread_capacity(uint8_t target, uint16_t lun);

  private:
    std::vector<uint8_t> config_space() const;
    // Throws std::invalid_argument for a target past max_target_.
    void check_target(uint8_t target, uint16_t lun) const;
    void stop_queues();
    // Publishes `next`, where `lun` of `target` came or went: the target's other LUNs and
    // the driver (a TRANSPORT_RESET event with `reason`) are told.  Requires changes_.
    void publish_change(Targets next, uint8_t target, uint16_t lun, uint32_t reason);

    const uint16_t request_queues_;
    const uint16_t queue_size_;
    ScsiCounters counters_;
    QueueCounters control_counters_;
    std::mutex changes_;  // serializes add_lun and remove_lun
    // Closes the images of removed LUNs that commands held (Lun::close_on): before the targets
    // and the queues, so that it outlives their LUNs.
    block::ImageCloser closer_;
    // Before the targets: the LUNs' IoQueues of a request queue go before its eventfd.
    std::vector<std::unique_ptr<CommandQueue>> commands_;
    TargetTable targets_;
    uint8_t max_target_ = 0;
    EventQueue events_;
    std::atomic<bool> hotplug_{false};  // the driver took VIRTIO_SCSI_F_HOTPLUG
    TaskSet tasks_;
    ControlHandler control_;
    std::atomic<uint32_t> cdb_size_;
    std::atomic<uint32_t> sense_size_;
    QueueWorkers workers_;
    // The control queue's own thread, its io_context and its worker.
    boost::asio::io_context control_io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> control_work_;
    std::jthread control_thread_;
    QueueWorkers control_workers_;
};

}  // namespace mvmm::devices::virtio::scsi
