#include "mem/guest_buffers.h"

namespace mvmm {

GuestBuffers::GuestBuffers(std::span<const Part> parts) : parts_(parts) {
    for (const Part& part : parts) size_ += part.size();
}

size_t GuestBuffers::piece_count() const noexcept {
    size_t count = 0;
    for (auto it = begin(); it != end(); ++it) ++count;
    return count;
}

GuestBuffers GuestBuffers::slice(uint64_t offset, uint64_t length) const noexcept {
    if (offset >= size_) return {};
    GuestBuffers out;
    out.size_ = std::min(length, size_ - offset);
    uint64_t position = skip_ + offset;
    size_t first = 0;
    while (position >= parts_[first].size()) position -= parts_[first++].size();
    out.parts_ = parts_.subspan(first);
    out.skip_ = position;
    return out;
}

uint64_t GuestBuffers::copy_to(uint64_t offset, std::span<uint8_t> out) const noexcept {
    uint64_t copied = 0;
    for (const Part piece : slice(offset, out.size())) {
        if (!piece.copy_to(0, out.subspan(copied, piece.size()))) break;  // whole: cannot fail
        copied += piece.size();
    }
    return copied;
}

uint64_t GuestBuffers::copy_from(uint64_t offset, std::span<const uint8_t> in) const noexcept {
    uint64_t copied = 0;
    for (const Part piece : slice(offset, in.size())) {
        if (!piece.copy_from(0, in.subspan(copied, piece.size()))) break;
        copied += piece.size();
    }
    return copied;
}

}  // namespace mvmm
