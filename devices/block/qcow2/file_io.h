// Whole transfers between an image file and host or guest buffers: short transfers and EINTR
// are retried, and anything less than the whole range is an error (EIO at the end of the file).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <span>
#include <system_error>

#include "base/fd.h"
#include "base/mapping.h"
#include "base/result.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::block::qcow2 {

using IoResult = Result<Ok, std::error_code>;

IoResult errno_result(int error);
inline IoResult io_error(std::errc error = std::errc::io_error) {
    return Unexpected{std::make_error_code(error)};
}

IoResult read_exact(int fd, uint64_t offset, std::span<uint8_t> into);
IoResult write_exact(int fd, uint64_t offset, std::span<const uint8_t> from);
IoResult read_exact(int fd, uint64_t offset, const GuestBuffers& into);
// The pieces one after the other from `offset`, in as few pwritev calls as the iovec window
// allows (a cluster's copy-on-write head, the guest's data and its tail go together).
IoResult write_exact(int fd, uint64_t offset, std::initializer_list<GuestBuffers> pieces);
IoResult sync_data(int fd);

// A host buffer seen as a one-part stream, for the paths guest data also takes.
class HostBuffer {
  public:
    explicit HostBuffer(std::span<uint8_t> bytes) : part_{GuestSlice(bytes)} {}
    HostBuffer(const HostBuffer&) = delete;
    HostBuffer& operator=(const HostBuffer&) = delete;
    GuestBuffers buffers() const { return part_[0].empty() ? GuestBuffers() : GuestBuffers(part_); }

  private:
    GuestBuffers::Part part_[1];
};

// An image file and how it must be read and written: with cache=none (O_DIRECT) every
// transfer's offset, lengths and buffer addresses are multiples of alignment().  Transfers
// that are (guest data the queues aligned, tables in the caches' memory, scratch.h's buffers)
// go straight to the file; the rest (header fields, L1 and refcount table entries, tables
// read at open, a raw backing file's last block) move through the file's own bounce buffer:
// the aligned blocks around them are read, and for writes patched and written back (the
// metadata lock keeps two writers off one block; metadata and data never share one, as
// alignment() <= 512 <= the cluster size).
class ImageFile {
  public:
    // `alignment`: 1 for a file opened without O_DIRECT; `fixed_size`: a block device, which
    // cannot grow.  Throws std::system_error when the bounce buffer cannot be mapped.
    ImageFile(Fd fd, size_t alignment, bool fixed_size);
    ImageFile(ImageFile&&) = delete;

    int fd() const noexcept { return fd_.get(); }
    size_t alignment() const noexcept { return alignment_; }
    bool fixed_size() const noexcept { return fixed_size_; }

    IoResult read(uint64_t offset, std::span<uint8_t> into) const;
    IoResult read(uint64_t offset, const GuestBuffers& into) const;
    // Reads until `into` is full or the file ends: how many bytes it read.
    Result<uint64_t, std::error_code> read_to_end(uint64_t offset, std::span<uint8_t> into) const;
    IoResult write(uint64_t offset, std::span<const uint8_t> from) const;
    // The pieces one after the other from `offset` (write_exact).
    IoResult write(uint64_t offset, std::initializer_list<GuestBuffers> pieces) const;
    IoResult sync() const { return sync_data(fd_.get()); }

  private:
    bool direct_ok(uint64_t offset, std::initializer_list<GuestBuffers> pieces) const noexcept;
    Result<uint64_t, std::error_code> bounce_read(uint64_t offset, const GuestBuffers& into) const;
    IoResult bounce_write(uint64_t offset, std::initializer_list<GuestBuffers> pieces) const;

    Fd fd_;
    size_t alignment_;
    bool fixed_size_;
    mutable std::mutex bounce_mutex_;
    Mapping bounce_;  // O_DIRECT only
};

// Zeroes every byte of `into`.
void fill_zero(const GuestBuffers& into);

}  // namespace mvmm::devices::block::qcow2
