// virtio-blk on a disk image.  Queue work (ring parsing, starting the disk I/O and completing
// it) runs on the Boost.Asio io_context the VMM passes in, never on a vCPU thread: each queue
// waits for its kick and its completions there, one queue on one thread at a time, with up to
// a queue's worth of requests in flight (aio=io_uring, threads or sync), so vmm may run the
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

class BlkDevice final : public Device {
  public:
    // Opens the image (block::open_disk_image; throws block::ImageError for the user, also for
    // aio=io_uring where the kernel refuses it).  `io` must outlive the device.
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
    const DiskInfo& disk_info() const noexcept { return info_; }  // as opened
    // For its owner's figures and idle-cache cleaning, whatever the format.
    block::DiskImage& image() const noexcept { return *image_; }
    block::AioMode aio() const noexcept { return aio_; }

    // Re-reads the image's size (the host grew or shrank it) and, when it changed, gives the
    // driver the new capacity with a config change interrupt.  Returns the size in bytes;
    // throws std::runtime_error (keeping the old size) when it is not whole logical blocks.
    // Any thread (the management socket's resize-disk runs on an I/O thread).
    uint64_t resize_from_image();

  private:
    BlkCounters counters_;
    std::unique_ptr<block::DiskImage> image_;
    const BlockSizes sizes_;
    const std::string serial_;
    const DiskInfo info_;
    std::atomic<uint64_t> capacity_sectors_;  // info_'s, until the image is resized
    const block::AioMode aio_;
    BlkDisk disk_;  // write_through set by activate() while no worker runs
    std::vector<std::unique_ptr<BlkQueue>> queues_;  // this activation's
    uint64_t features_;
    uint16_t num_queues_;
    uint16_t queue_size_;
    std::vector<uint8_t> config_space_;  // its capacity is the disk's at open
    std::mutex interrupt_mutex_;
    Interrupt* interrupt_ = nullptr;  // by interrupt_mutex_: from activate() to reset()
    QueueWorkers workers_;
};

}  // namespace mvmm::devices::virtio::blk
