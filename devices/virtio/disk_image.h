// Raw disk images (regular files or block devices), shared by virtio-blk and virtio-scsi.  Every
// I/O call blocks: they run on I/O threads, never on a vCPU thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "devices/virtio/guest_buffers.h"
#include "mem/fd.h"
#include "mem/result.h"

namespace mvmm::devices::virtio {

inline constexpr uint64_t kImageBlockSize = 512;  // an image's size is a multiple of it

using IoResult = Result<Ok, std::error_code>;

// The serial a disk gets when none is given: the last `max_bytes` bytes of its image's file
// name (disk-07.img tells disks apart better by its end), anything not printable ASCII as '_'.
std::string serial_from_file_name(std::string_view path, size_t max_bytes);

class DiskImage {
  public:
    // Opens `path` (read-only disks with O_RDONLY) and locks it, shared for read-only
    // disks, exclusive otherwise, so that a disk given twice or used by another VMM is
    // refused.  Throws std::runtime_error with a message for the user.
    static DiskImage open(const std::string& path, bool read_only);

    // Flushes a writable image before closing it: what the guest wrote without asking for a
    // flush reaches the disk too (a guest stopped by a signal).  A failure is logged.
    ~DiskImage();
    DiskImage(const DiskImage&) = delete;
    DiskImage& operator=(const DiskImage&) = delete;

    const std::string& path() const noexcept { return path_; }
    uint64_t size() const noexcept { return size_; }  // bytes, a multiple of kImageBlockSize
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
    // The range reads back as zeroes; `may_unmap` lets the host deallocate it.  Where the host
    // cannot zero a range itself, the zeroes come from a read-only mapping.
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const;
    // `pattern` (not empty) again and again over [offset, offset + length), the last copy cut
    // short, in vectored writes whose pieces all point at it: nothing is copied or allocated.
    IoResult write_repeated(uint64_t offset, uint64_t length, GuestBuffers::Part pattern) const;

  private:
    DiskImage(std::string path, Fd fd, uint64_t size, bool read_only);

    std::string path_;
    Fd fd_;
    uint64_t size_;
    bool read_only_;
    std::atomic<bool> flush_failed_{false};
};

}  // namespace mvmm::devices::virtio
