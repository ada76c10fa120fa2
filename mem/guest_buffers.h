// A chain's readable or writable buffers, already checked to lie in guest RAM, seen as one byte
// stream.  Virtio 1.x drivers may split a request across descriptors any way they like
// (VIRTIO_F_ANY_LAYOUT is implied), so devices address requests by offset, not by descriptor.
// A view: the parts belong to the request (its slot, see queue_worker.h), and slicing,
// copying and walking the pieces never allocate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "mem/guest_slice.h"

namespace mvmm {

class GuestBuffers {
  public:
    using Part = GuestSlice;  // one descriptor's buffer, from GuestMemory::slice

    // One piece of the stream after another: the parts, the first and last cut to the view.
    class Iterator {
      public:
        Iterator() = default;
        Part operator*() const {
            // Cannot fail: skip_ lies inside the part, the view's bytes inside the parts.
            return part_->subslice(skip_, std::min(part_->size() - skip_, left_)).value();
        }
        Iterator& operator++() {
            left_ -= (**this).size();
            ++part_;
            skip_ = 0;
            return *this;
        }
        // Only iterators of one view compare; the end is where no byte is left.
        bool operator==(const Iterator& other) const noexcept { return left_ == other.left_; }

      private:
        friend class GuestBuffers;
        Iterator(const Part* part, uint64_t skip, uint64_t left)
            : part_(part), skip_(skip), left_(left) {}

        const Part* part_ = nullptr;
        uint64_t skip_ = 0;
        uint64_t left_ = 0;
    };

    GuestBuffers() = default;
    // All of `parts`, none empty; they must outlive the view and every slice of it.
    explicit GuestBuffers(std::span<const Part> parts);

    uint64_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    Iterator begin() const noexcept { return {parts_.data(), skip_, size_}; }
    Iterator end() const noexcept { return {}; }
    size_t piece_count() const noexcept;

    // Bytes [offset, offset + length) of the stream; clamped to the end of the stream.
    GuestBuffers slice(uint64_t offset, uint64_t length) const noexcept;
    // Copy between the stream at `offset` and host memory; return how many bytes were copied
    // (fewer than asked at the end of the stream).  Devices parse only what they copied out.
    uint64_t copy_to(uint64_t offset, std::span<uint8_t> out) const noexcept;
    uint64_t copy_from(uint64_t offset, std::span<const uint8_t> in) const noexcept;

  private:
    std::span<const Part> parts_;  // the stream starts skip_ bytes into parts_[0]
    uint64_t skip_ = 0;
    uint64_t size_ = 0;
};

}  // namespace mvmm
