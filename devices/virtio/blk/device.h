// virtio-blk on a raw image.  Queue work (ring parsing and the disk I/O itself) runs on the
// Boost.Asio io_context the VMM passes in, never on a vCPU thread: each queue waits for its
// kick eventfd there, and a strand per queue keeps one queue on one thread at a time, so vmm
// may run the io_context on any number of I/O threads (see README.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/virtio/blk/config.h"
#include "devices/virtio/blk/io.h"
#include "devices/virtio/blk/request.h"
#include "devices/virtio/device.h"

namespace boost::asio {
class io_context;
}

namespace mvmm::devices::virtio::blk {

// Per-device counters, readable from any thread.
struct BlkCounters {
    std::atomic<uint64_t> requests{0};       // chains returned to the driver
    std::atomic<uint64_t> bad_requests{0};   // completed with IOERR/UNSUPP (or no status byte)
    std::atomic<uint64_t> io_errors{0};      // host I/O failed: completed with IOERR
    std::atomic<uint64_t> failed_queues{0};  // stopped by a corrupt ring: NEEDS_RESET
};

class BlkDevice final : public Device {
  public:
    static constexpr uint16_t kQueueSize = 256;

    // Opens the image (DiskImage::open; throws std::runtime_error for the user).  `io` must
    // outlive the device.
    BlkDevice(const DiskConfig& config, boost::asio::io_context& io);
    ~BlkDevice() override;

    uint32_t device_id() const override { return 2; }
    uint64_t features() const override { return features_; }
    uint16_t num_queues() const override { return num_queues_; }
    uint16_t max_queue_size() const override { return kQueueSize; }
    void read_config(uint64_t offset, std::span<uint8_t> data) const override;
    void write_config(uint64_t offset, std::span<const uint8_t> data) override;
    // `context.memory` and `context.interrupt` must stay valid until reset() or destruction.
    bool activate(ActivateContext context) override;
    // Stops every queue and waits for a batch in progress to finish.  Called from a vCPU (or
    // the main) thread, never from one of the io_context's threads, which would wait for
    // itself.
    void reset() override;
    bool needs_reset() const override { return needs_reset_.load(); }

    const BlkCounters& counters() const noexcept { return counters_; }
    const DiskInfo& disk_info() const noexcept { return info_; }

  private:
    class QueueWorker;

    // Parses and executes one chain, writes its status; returns the used length.
    uint32_t complete(const DescriptorChain& chain, bool write_through);
    // A queue can no longer be used: set NEEDS_RESET, log (once at error level).
    void fail_queue(uint16_t index, std::string_view why);
    void stop_workers();

    DiskImage image_;
    std::string serial_;
    DiskInfo info_;
    uint64_t features_;
    uint16_t num_queues_;
    std::vector<uint8_t> config_space_;
    boost::asio::io_context& io_;
    BlkCounters counters_;
    std::atomic<bool> needs_reset_{false};
    std::atomic<bool> ring_error_logged_{false};
    std::atomic<bool> io_error_logged_{false};
    std::vector<std::shared_ptr<QueueWorker>> workers_;
};

}  // namespace mvmm::devices::virtio::blk
