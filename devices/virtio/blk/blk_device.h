// virtio-blk on a raw image.  Queue work (ring parsing and the disk I/O itself) runs on the
// Boost.Asio io_context the VMM passes in, never on a vCPU thread: each queue waits for its
// kick eventfd there, and each queue runs on one thread at a time, so vmm may run the
// io_context on any number of I/O threads (see README.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "devices/virtio/blk/config.h"
#include "devices/virtio/blk/io.h"
#include "devices/virtio/blk/request.h"
#include "devices/virtio/block_size.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"

namespace boost::asio {
class io_context;
}

namespace mvmm::devices::virtio::blk {

// Per-device counters, readable from any thread: the queue workers' and the requests'.
struct BlkCounters : QueueCounters {
    std::atomic<uint64_t> bad_requests{0};  // completed with IOERR/UNSUPP (or no status byte)
    std::atomic<uint64_t> io_errors{0};     // host I/O failed: completed with IOERR
};

class BlkDevice final : public Device {
  public:
    // Opens the image (block::open_disk_image; throws block::ImageError for the user).  `io` must
    // outlive the device.
    BlkDevice(const DiskConfig& config, boost::asio::io_context& io);

    uint32_t device_id() const override { return 2; }
    uint64_t features() const override { return features_; }
    uint16_t num_queues() const override { return num_queues_; }
    uint16_t max_queue_size() const override { return queue_size_; }
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    void write_config(uint64_t offset, std::span<const uint8_t> data) override;
    // `context.memory` and `context.interrupt` must stay valid until reset() or destruction.
    bool activate(ActivateContext context) override;
    // Stops every queue and waits for a batch in progress to finish.  Called from a vCPU (or
    // the main) thread, never from one of the io_context's threads, which would wait for
    // itself.
    void reset() override;
    bool needs_reset() const override { return counters_.needs_reset.load(); }

    const BlkCounters& counters() const noexcept { return counters_; }
    const DiskInfo& disk_info() const noexcept { return requests_.info; }  // as opened
    // For its owner's figures and idle-cache cleaning, whatever the format.
    block::DiskImage& image() const noexcept { return *requests_.image; }

    // Re-reads the image's size (the host grew or shrank it) and, when it changed, gives the
    // driver the new capacity with a config change interrupt.  Returns the size in bytes;
    // throws std::runtime_error (keeping the old size) when it is not whole logical blocks.
    // Any thread (the management socket's resize-disk runs on an I/O thread).
    uint64_t resize_from_image();

  private:
    // Parses and executes one chain on the image and writes its status; every queue's.
    class Requests final : public RequestHandler {
      public:
        Requests(const DiskConfig& config, BlkCounters& counters);
        uint32_t handle(const DescriptorChain& chain) override;

        std::unique_ptr<block::DiskImage> image;
        const BlockSizes sizes;
        const std::string serial;
        const DiskInfo info;
        std::atomic<uint64_t> capacity_sectors;  // info's, until the image is resized
        // Set by activate() while no worker runs: without FLUSH every write is flushed.
        bool write_through = false;

      private:
        BlkCounters& counters_;
        std::atomic<bool> io_error_logged_{false};
    };

    BlkCounters counters_;
    Requests requests_;
    uint64_t features_;
    uint16_t num_queues_;
    uint16_t queue_size_;
    std::vector<uint8_t> config_space_;  // its capacity is the disk's at open
    std::mutex interrupt_mutex_;
    Interrupt* interrupt_ = nullptr;  // by interrupt_mutex_: from activate() to reset()
    QueueWorkers workers_;
};

}  // namespace mvmm::devices::virtio::blk
