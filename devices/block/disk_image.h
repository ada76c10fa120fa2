// A disk image as virtio-blk and virtio-scsi see it, whatever its format (a raw file or block
// device, a qcow2 image with its backing chain): a size and whole-range reads and writes of
// guest buffers, flush, discard and write-zeroes.  Every call blocks and may come from any I/O
// thread (or a thread of the aio=threads pool), several at once (one disk's queues); never from
// a vCPU thread.  open_queue() gives a queue that keeps many operations in flight (io_queue.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>

#include "base/fd.h"
#include "base/result.h"
#include "base/user_error.h"
#include "devices/block/cache_stats.h"
#include "devices/block/image_options.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::block {

inline constexpr uint64_t kImageBlockSize = 512;  // an image's size is a multiple of it

using IoResult = Result<Ok, std::error_code>;

// An image that cannot be opened: one line for the user naming the file and what is wrong.
class ImageError : public UserError {
  public:
    using UserError::UserError;
};

class IoQueue;

class DiskImage {
  public:
    virtual ~DiskImage() = default;

    virtual const std::string& path() const noexcept = 0;
    virtual ImageFormat format() const noexcept = 0;
    // Bytes, a multiple of kImageBlockSize; reread_size() may change it while I/O runs.
    virtual uint64_t size() const noexcept = 0;
    // Reads the image's size again, after the host grew or shrank it, and returns it; throws
    // std::runtime_error (and keeps the old size) when it is not a positive multiple of
    // `block_size` bytes.
    virtual uint64_t reread_size(uint64_t block_size) = 0;
    virtual bool read_only() const noexcept = 0;

    // Whole transfers: anything less than the whole range is an error.
    virtual IoResult read(uint64_t offset, const GuestBuffers& into) const = 0;
    virtual IoResult write(uint64_t offset, const GuestBuffers& from) const = 0;
    // Everything written before it is durable when it succeeds.  After one failure every later
    // flush fails too: a write the guest was told is safe may be lost.
    virtual IoResult flush() = 0;
    // Deallocation is a hint: an image that cannot free the range still succeeds.
    virtual IoResult discard(uint64_t offset, uint64_t length) const = 0;
    // The range reads back as zeroes; `may_unmap` lets the image deallocate it.
    virtual IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const = 0;
    // `pattern` (not empty) again and again over [offset, offset + length), the last copy cut
    // short, in writes whose pieces all point at it: nothing is copied or allocated.
    IoResult write_repeated(uint64_t offset, uint64_t length, GuestBuffers::Part pattern) const;

    // The metadata caches (qcow2's tables, its backing chain's added in); zeroes for raw.
    virtual CacheStats cache_stats() const { return {}; }
    // Drops cached metadata nobody used for the image's cache-clean-interval; the owner calls
    // it now and then (`now` may be a driven clock).  Returns how many tables went.
    virtual size_t clean_idle(std::chrono::steady_clock::time_point /*now*/) { return 0; }
    // That interval; 0 when clean_idle() never has anything to drop (raw).
    virtual std::chrono::seconds cache_clean_interval() const noexcept { return {}; }

    // What read() and write() need of guest buffers: their host addresses and lengths are
    // multiples of it (cache=none: O_DIRECT), else the queues bounce them.  1: anything goes.
    virtual size_t buffer_alignment() const noexcept { return 1; }

    // A queue for `depth` operations in flight at once, used by one context at a time (a
    // virtqueue's).  io_uring where the image maps guest offsets straight to its file (raw),
    // else the thread pool; threads and sync for any image.  `completions`: the eventfd its
    // completion_fd() is, shared by queues one context polls together (virtio-scsi's LUNs of a
    // request queue; it must outlive the queue), else one of its own.  Throws
    // std::system_error when the host refuses a ring or a thread.
    std::unique_ptr<IoQueue> open_queue(AioMode mode, uint32_t depth,
                                        const EventFd* completions = nullptr);

  protected:
    // The io_uring backend; the default, for images whose offsets need translating (qcow2's
    // metadata work is synchronous), is the thread pool.
    virtual std::unique_ptr<IoQueue> open_uring_queue(uint32_t depth, const EventFd* completions);
};

// Opens `path` as `options.format` says (Auto: qcow2 when its header says so, else raw) and
// locks it: shared for read-only disks, exclusive otherwise, so that a disk given twice or used
// by another VMM is refused.  A file forced to qcow2 that is not one is an error; a qcow2 image
// forced to raw opens raw (its bytes as they are, as QEMU does).  Throws ImageError.
std::unique_ptr<DiskImage> open_disk_image(const std::string& path, bool read_only,
                                           const ImageOptions& options = {});

// The serial a disk gets when none is given: the last `max_bytes` bytes of its image's file
// name (disk-07.img tells disks apart better by its end), anything not printable ASCII as '_'.
std::string serial_from_file_name(std::string_view path, size_t max_bytes);

}  // namespace mvmm::devices::block
