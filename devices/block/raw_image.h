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
    // Opens `path` (read-only disks with O_RDONLY; cache=none with O_DIRECT) and locks it (see
    // open_disk_image).  Throws ImageError.
    static std::unique_ptr<RawImage> open(const std::string& path, bool read_only,
                                          CacheMode cache = CacheMode::Writeback);
    RawImage(Opened, std::string path, Fd fd, uint64_t size, bool read_only, size_t alignment);

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
    // cache=none: the file's O_DIRECT alignment (statx), else 1.
    size_t buffer_alignment() const noexcept override { return alignment_; }

    // For the io_uring queue, which works on the file itself.
    int fd() const noexcept { return fd_.get(); }
    // A flush's outcome, `result` of fdatasync (0 or -errno), made sticky: a failure is kept
    // and every later flush reports EIO.
    int64_t record_flush(int64_t result) noexcept;
    bool flush_failed() const noexcept { return flush_failed_.load(); }

  protected:
    std::unique_ptr<IoQueue> open_uring_queue(uint32_t depth, const EventFd* completions) override;

  private:
    std::string path_;
    Fd fd_;
    std::atomic<uint64_t> size_;
    bool read_only_;
    size_t alignment_;
    std::atomic<bool> flush_failed_{false};
};

// Whether fallocate() failed only because the host cannot do that kind of fallocate.
bool fallocate_unsupported(int error);

}  // namespace mvmm::devices::block
