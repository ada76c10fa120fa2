// Whole transfers between an image file and host or guest buffers: short transfers and EINTR
// are retried, and anything less than the whole range is an error (EIO at the end of the file).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <system_error>

#include "base/result.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::block::qcow2 {

using IoResult = Result<Ok, std::error_code>;

IoResult errno_result(int error);
inline IoResult io_error(std::errc error = std::errc::io_error) {
    return Unexpected{std::make_error_code(error)};
}

IoResult read_exact(int fd, uint64_t offset, std::span<uint8_t> into);
// Reads until `into` is full or the file ends: how many bytes it read.
Result<uint64_t, std::error_code> read_to_end(int fd, uint64_t offset, std::span<uint8_t> into);
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

// Zeroes every byte of `into`.
void fill_zero(const GuestBuffers& into);

}  // namespace mvmm::devices::block::qcow2
