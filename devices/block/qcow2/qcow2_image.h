// A qcow2 disk image (versions 2 and 3) with its backing chain, behind the same calls as the raw
// DiskImage (devices/virtio/disk_image.h), for virtio-blk and virtio-scsi on the I/O threads.
// Every call may come from any thread, several at once (one disk's queues).  See README.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>

#include "devices/block/qcow2/options.h"
#include "devices/virtio/guest_buffers.h"
#include "mem/result.h"

namespace mvmm::devices::block::qcow2 {

using IoResult = Result<Ok, std::error_code>;
class Engine;

class Qcow2Image {
  public:
    // Opens `path` and its backing files, checks them and locks them (the image exclusive
    // unless read-only, backing files shared).  Throws std::runtime_error with one line naming
    // the file and what is wrong.
    static std::unique_ptr<Qcow2Image> open(const std::string& path, bool read_only,
                                            const Qcow2Options& options = {});

    // Writes what the caches hold and syncs a writable image; a failure is logged.
    ~Qcow2Image();
    Qcow2Image(const Qcow2Image&) = delete;
    Qcow2Image& operator=(const Qcow2Image&) = delete;

    const std::string& path() const noexcept { return path_; }
    uint64_t size() const noexcept { return size_; }  // bytes, a multiple of 512
    bool read_only() const noexcept { return read_only_; }

    // Whole transfers, as DiskImage's.  A corrupt table entry met on the way is EIO for that
    // request only.
    IoResult read(uint64_t offset, const virtio::GuestBuffers& into) const;
    IoResult write(uint64_t offset, const virtio::GuestBuffers& from) const;
    // Writes every dirty table (in dependency order), then fdatasync.  After one failure every
    // later flush fails too.
    IoResult flush();
    // Whole clusters are freed (and, on version 3, read as zeroes); the rest is left alone.
    IoResult discard(uint64_t offset, uint64_t length) const;
    // The range reads back as zeroes: whole clusters by the zero flag (version 3; `may_unmap`
    // also frees them), the rest by writing zeroes.
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const;

    // Drops the cached tables of the image and its backing files that nobody used for the
    // cache-clean-interval: call it periodically (`now` may be a driven clock).  Returns how
    // many tables went.
    size_t clean_idle(std::chrono::steady_clock::time_point now);
    // The caches of the image and its backing files, added up.
    CacheStats stats() const;

  private:
    Qcow2Image(std::string path, std::unique_ptr<Engine> engine);

    std::string path_;
    uint64_t size_;
    bool read_only_;
    std::unique_ptr<Engine> engine_;
};

}  // namespace mvmm::devices::block::qcow2
