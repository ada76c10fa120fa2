// One logical unit: a raw image, its size, block sizes and read-only flag, its write cache
// setting and pending unit attention, and who it says it is.  It carries out the commands that
// touch the image; what a command returns otherwise is answered from its LunInfo and
// LunIdentity alone (responses.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <system_error>

#include "devices/block/disk_image.h"
#include "devices/block/image_closer.h"
#include "devices/block/io_queue.h"
#include "devices/virtio/block_size.h"
#include "devices/virtio/scsi/cdb.h"
#include "devices/virtio/scsi/config.h"
#include "devices/virtio/scsi/mode_select.h"
#include "devices/virtio/scsi/responses.h"
#include "devices/virtio/scsi/unmap_list.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::virtio::scsi {

// What a command did: GOOD or CHECK CONDITION with sense, and how many bytes it moved.
struct Outcome {
    std::optional<Sense> sense;  // set: CHECK CONDITION
    uint64_t transferred = 0;

    static Outcome good(uint64_t transferred = 0) { return {std::nullopt, transferred}; }
    static Outcome check(const Sense& sense) { return {sense, 0}; }
};

class Lun {
  public:
    // Opens and locks the image; throws block::ImageError or std::invalid_argument for the
    // user.  The LUN starts with a POWER ON unit attention, as a disk just switched on.
    explicit Lun(const LunConfig& config);
    // The same on an image opened already (a test's gated image).
    Lun(const LunConfig& config, std::unique_ptr<block::DiskImage> image);
    // Flushes and closes the image, on this thread unless close_on() said otherwise.
    ~Lun();
    Lun(const Lun&) = delete;
    Lun& operator=(const Lun&) = delete;

    // Expires once the LUN is gone and its image closed (flushed, its fd and lock released).
    std::weak_ptr<const void> image_open() const noexcept { return open_; }
    // A removed LUN that commands still hold: whichever thread lets go of it last (a request
    // queue's, serving other LUNs), its image is flushed and closed on `closer`'s thread, which
    // must outlive it.  Called by an owner, before it lets go.
    void close_on(block::ImageCloser& closer) noexcept { closer_ = &closer; }

    // A snapshot: the capacity and the write cache may change while commands run.
    LunInfo info() const noexcept;
    const LunIdentity& identity() const noexcept { return identity_; }
    // For the owner's figures and idle-cache cleaning, whatever the format.
    block::DiskImage& image() const noexcept { return *image_; }

    // Each takes what parse_cdb() checked, and buffers at least as large as its transfer.
    // They are thread-safe: the request queues of a controller share its LUNs.
    Outcome unmap(const GuestBuffers& parameter_list);
    Outcome write_same(const WriteSame& command, const GuestBuffers& data_out);
    Outcome verify(const Verify& command, const GuestBuffers& data_out);
    Outcome mode_select(const ModeSelect& command, const GuestBuffers& parameter_list);

    // The request queues' way to the image: READ, WRITE and SYNCHRONIZE CACHE run as image
    // operations through an IoQueue of request queue `queue` (made on its first use, on that
    // queue's context, which alone uses it; `completions` is its eventfd and must outlive the
    // LUN's use of it).  Throws std::system_error when the host refuses the backend.
    block::IoQueue& io_queue(uint16_t queue, uint32_t depth, const EventFd& completions);
    // The `index`-th image operation of `command` (READ, WRITE or SYNCHRONIZE CACHE), nullopt
    // past the last: a read; a write, then a flush with FUA or `write_cache` off; a flush.
    std::optional<block::IoOp> io_operation(const Command& command, bool write_cache,
                                            const GuestBuffers& data_out,
                                            const GuestBuffers& data_in, size_t index) const;
    // An operation of a command failed: the sense a real target reports (the first error logged).
    Outcome io_failed(block::IoOp::Kind kind, const std::error_code& error);

    // SAM-5 unit attention conditions, reported once each to the next command that is not
    // INQUIRY, REPORT LUNS or REQUEST SENSE (or by REQUEST SENSE): the most important first.
    std::optional<Sense> take_unit_attention();
    // A LUN reset (or a reset of the target or the controller): POWER ON, RESET, OR BUS DEVICE
    // RESET OCCURRED; the write cache is back to its default.
    void reset();
    // The host changed the image's size: reads it again and, when it changed, reports CAPACITY
    // DATA HAS CHANGED.  Returns the new size in bytes; throws std::runtime_error (and keeps
    // the old size) when the image no longer holds whole blocks.
    uint64_t reread_capacity();
    // A LUN was added to or removed from this LUN's target: REPORTED LUNS DATA HAS CHANGED.
    void report_luns_changed() noexcept { attention_.fetch_or(kLunsChanged); }

  private:
    // fdatasync: MODE SELECT turning the write cache off makes what it held stable.
    Outcome synchronize_cache();
    // Logs the first host I/O error of this LUN as a warning, the rest at debug level.
    Outcome failed(std::string_view what, const std::error_code& error, const Sense& sense);
    // WRITE SAME completed: with the write cache off, it is made stable before it completes,
    // as virtio-blk's write-through.
    Outcome written(uint64_t transferred);

    enum Attention : uint8_t { kPowerOnOrReset = 1, kCapacityChanged = 2, kLunsChanged = 4 };

    block::ImageCloser* closer_ = nullptr;  // published to the last owner by the refcount
    std::shared_ptr<const void> open_;      // what image_open() watches; released after the image
    std::unique_ptr<block::DiskImage> image_;
    const BlockSizes sizes_;
    const bool read_only_;
    std::atomic<uint64_t> blocks_;
    std::atomic<bool> write_cache_{true};
    std::atomic<uint8_t> attention_{kPowerOnOrReset};
    LunIdentity identity_;
    std::atomic<bool> io_error_logged_{false};
    const block::AioMode aio_;
    // Per request queue, made on its first command here; gone before the image.
    std::array<std::unique_ptr<block::IoQueue>, kMaxRequestQueues> io_queues_;
};

}  // namespace mvmm::devices::virtio::scsi
