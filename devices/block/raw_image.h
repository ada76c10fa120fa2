// Raw disk images: a regular file or a block device, guest offset = file offset.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "base/fd.h"
#include "devices/block/disk_image.h"

namespace mvmm::devices::block {

class RawImage final : public DiskImage {
    struct Opened {};  // only open() makes one

  public:
    // Opens `path` (read-only disks with O_RDONLY) and locks it (see open_disk_image).  Throws
    // ImageError.
    static std::unique_ptr<RawImage> open(const std::string& path, bool read_only);
    RawImage(Opened, std::string path, Fd fd, uint64_t size, bool read_only);

    // Flushes a writable image before closing it: what the guest wrote without asking for a
    // flush reaches the disk too (a guest stopped by a signal).  A failure is logged.
    ~RawImage() override;
    RawImage(const RawImage&) = delete;
    RawImage& operator=(const RawImage&) = delete;

    const std::string& path() const noexcept override { return path_; }
    ImageFormat format() const noexcept override { return ImageFormat::Raw; }
    uint64_t size() const noexcept override { return size_.load(); }
    // fstat (or the block device's size) again.
    uint64_t reread_size(uint64_t block_size) override;
    bool read_only() const noexcept override { return read_only_; }

    // preadv/pwritev; short transfers and EINTR are retried.
    IoResult read(uint64_t offset, const GuestBuffers& into) const override;
    IoResult write(uint64_t offset, const GuestBuffers& from) const override;
    // fdatasync.  The kernel reports a failed write-back once, hence the sticky failure.
    IoResult flush() override;
    // A punched hole; a host that cannot punch holes still succeeds.
    IoResult discard(uint64_t offset, uint64_t length) const override;
    // fallocate's zeroing where the host has it; where it does not (tmpfs, NFS...), zeroes
    // written from a read-only mapping.
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const override;

  private:
    std::string path_;
    Fd fd_;
    std::atomic<uint64_t> size_;
    bool read_only_;
    std::atomic<bool> flush_failed_{false};
};

}  // namespace mvmm::devices::block
