// Raw disk images (regular files or block devices) and the execution of checked requests on
// them.  Every call blocks: they run on I/O threads, never on a vCPU thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "devices/virtio/blk/config.h"
#include "devices/virtio/blk/request.h"
#include "mem/fd.h"
#include "mem/result.h"

namespace mvmm::devices::virtio::blk {

using IoResult = Result<Ok, std::error_code>;

class DiskImage {
  public:
    // Opens config.path (read-only disks with O_RDONLY) and locks it, shared for read-only
    // disks, exclusive otherwise, so that a disk given twice or used by another VMM is
    // refused.  Throws std::runtime_error with a message for the user.
    static DiskImage open(const DiskConfig& config);

    DiskImage(const DiskImage&) = delete;
    DiskImage& operator=(const DiskImage&) = delete;

    const std::string& path() const noexcept { return path_; }
    uint64_t size() const noexcept { return size_; }  // bytes, a multiple of 512
    bool read_only() const noexcept { return read_only_; }

    // Whole transfers: short transfers and EINTR are retried; anything less than the whole
    // range is an error.
    IoResult read(uint64_t offset, const GuestBuffers& into) const;
    IoResult write(uint64_t offset, const GuestBuffers& from) const;
    // fdatasync.  The kernel reports a failed write-back once, so after one failure every
    // later flush fails too: a write the guest was told is safe may be lost.
    IoResult flush();
    // Deallocation is a hint: a host that cannot punch holes still succeeds.
    IoResult discard(uint64_t offset, uint64_t length) const;
    // The range reads back as zeroes; `may_unmap` lets the host deallocate it.
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const;

  private:
    DiskImage(std::string path, Fd fd, uint64_t size, bool read_only);

    std::string path_;
    Fd fd_;
    uint64_t size_;
    bool read_only_;
    std::atomic<bool> flush_failed_{false};
};

// Carries out `request` on `disk`.  `id` answers get-id (NUL-padded to 20 bytes).  With
// `write_through` (the driver did not negotiate VIRTIO_BLK_F_FLUSH) every write is flushed
// before it completes, as the spec then requires.
IoResult execute(const Request& request, DiskImage& disk, std::string_view id, bool write_through);

}  // namespace mvmm::devices::virtio::blk
