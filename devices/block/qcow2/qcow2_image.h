// A qcow2 disk image (versions 2 and 3) with its backing chain, a DiskImage for virtio-blk and
// virtio-scsi on the I/O threads.  Every call may come from any thread, several at once (one
// disk's queues).  See README.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "devices/block/disk_image.h"
#include "devices/block/qcow2/options.h"

namespace mvmm::devices::block::qcow2 {

class Engine;

class Qcow2Image final : public DiskImage {
    struct Opened {};  // only open() makes one

  public:
    // Opens `path` and its backing files, checks them and locks them (the image exclusive
    // unless read-only, backing files shared); cache=none opens them all with O_DIRECT.
    // Throws ImageError naming the file and what is wrong.
    static std::unique_ptr<Qcow2Image> open(const std::string& path, bool read_only,
                                            const Qcow2Options& options = {},
                                            CacheMode cache = CacheMode::Writeback);
    Qcow2Image(Opened, std::string path, std::unique_ptr<Engine> engine, size_t alignment);

    // Writes what the caches hold and syncs a writable image; a failure is logged.
    ~Qcow2Image() override;
    Qcow2Image(const Qcow2Image&) = delete;
    Qcow2Image& operator=(const Qcow2Image&) = delete;

    const std::string& path() const noexcept override { return path_; }
    ImageFormat format() const noexcept override { return ImageFormat::Qcow2; }
    uint64_t size() const noexcept override { return size_; }
    // The size is the header's, which only this process writes while the image is open: a
    // resize of the file changes nothing the guest sees.  Throws std::runtime_error saying so.
    uint64_t reread_size(uint64_t block_size) override;
    bool read_only() const noexcept override { return read_only_; }

    // Whole transfers.  A corrupt table entry met on the way is EIO for that request only.
    IoResult read(uint64_t offset, const GuestBuffers& into) const override;
    IoResult write(uint64_t offset, const GuestBuffers& from) const override;
    // Writes every dirty table (in dependency order), then fdatasync.  After one failure every
    // later flush fails too.
    IoResult flush() override;
    // Whole clusters are freed (and, on version 3, read as zeroes); the rest is left alone.
    IoResult discard(uint64_t offset, uint64_t length) const override;
    // The range reads back as zeroes: whole clusters by the zero flag (version 3; `may_unmap`
    // also frees them), the rest by writing zeroes.
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const override;

    // The caches of the image and its backing files, added up.
    CacheStats cache_stats() const override;
    // Drops the cached tables of the image and its backing files that nobody used for the
    // cache-clean-interval; calls between two cleanings only look at the clock.
    size_t clean_idle(std::chrono::steady_clock::time_point now) override;
    std::chrono::seconds cache_clean_interval() const noexcept override;
    // cache=none: the largest O_DIRECT alignment of the chain's files, else 1.
    size_t buffer_alignment() const noexcept override { return alignment_; }

  private:
    std::string path_;
    uint64_t size_;
    bool read_only_;
    size_t alignment_;
    std::unique_ptr<Engine> engine_;
};

}  // namespace mvmm::devices::block::qcow2
