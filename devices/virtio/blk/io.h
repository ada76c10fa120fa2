// The execution of checked virtio-blk requests on a disk image, many in flight per queue: each
// request is a short sequence of image operations (a read; a write and, write-through, its
// flush; each discard or write-zeroes range in turn) run through the queue's block::IoQueue
// (aio=io_uring, threads or sync), its state kept in the request's slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "devices/block/io_queue.h"
#include "devices/virtio/blk/request.h"
#include "devices/virtio/queue_worker.h"

namespace mvmm::devices::virtio::blk {

// Per-device counters, readable from any thread: the queue workers' and the requests'.
struct BlkCounters : QueueCounters {
    std::atomic<uint64_t> bad_requests{0};  // completed with IOERR/UNSUPP (or no status byte)
    std::atomic<uint64_t> io_errors{0};     // host I/O failed: completed with IOERR
};

// The `index`-th image operation of `request` (0 first), nullopt past the last.  With
// `write_through` (the driver did not negotiate VIRTIO_BLK_F_FLUSH) a flush follows whatever
// changes the disk, as the spec then requires.  GetId has none.
std::optional<block::IoOp> operation(const Request& request, size_t index, bool write_through);

// What every queue of a disk shares.
struct BlkDisk {
    block::DiskImage& image;
    const std::string& serial;                      // get-id's answer, NUL-padded to 20 bytes
    const DiskInfo& info;                           // as opened
    const std::atomic<uint64_t>& capacity_sectors;  // info's, until the image is resized
    BlkCounters& counters;
    bool write_through = false;  // set at activation, while no queue runs
};

// One queue's requests: the handler its worker starts them on.
class BlkQueue final : public AsyncRequestHandler {
  public:
    // `disk` must outlive the queue.  Throws std::system_error when the host refuses the
    // backend (a ring, a thread).
    BlkQueue(const BlkDisk& disk, block::AioMode aio, uint16_t queue_size);

    size_t state_bytes(uint16_t queue_size) const override;
    void start(InFlight& request) override;
    void progress() override { io_->progress(); }
    int completion_fd() const noexcept override { return io_->completion_fd(); }

  private:
    struct Pending;
    void next(Pending& pending);
    void step_done(Pending& pending, const block::IoResult& result);
    void finish(InFlight& request, Status status);

    const BlkDisk& disk_;
    std::unique_ptr<block::IoQueue> io_;
};

}  // namespace mvmm::devices::virtio::blk
