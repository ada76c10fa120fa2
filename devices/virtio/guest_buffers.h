// An ordered list of guest buffers, already checked to lie in guest RAM, seen as one byte
// stream.  Virtio 1.x drivers may split a request across descriptors any way they like
// (VIRTIO_F_ANY_LAYOUT is implied), so devices address requests by offset, not by descriptor.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mvmm::devices::virtio {

class GuestBuffers {
  public:
    // `part` must come from GuestMemory::span; empty parts are dropped.
    void append(std::span<uint8_t> part);

    uint64_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    const std::vector<std::span<uint8_t>>& parts() const noexcept { return parts_; }

    // Bytes [offset, offset + length) of the stream; clamped to the end of the stream.
    GuestBuffers slice(uint64_t offset, uint64_t length) const;
    // Copy between the stream at `offset` and host memory; return how many bytes were copied
    // (fewer than asked at the end of the stream).
    uint64_t copy_to(uint64_t offset, std::span<uint8_t> out) const;
    uint64_t copy_from(uint64_t offset, std::span<const uint8_t> in) const;

  private:
    std::vector<std::span<uint8_t>> parts_;
    uint64_t size_ = 0;
};

}  // namespace mvmm::devices::virtio
