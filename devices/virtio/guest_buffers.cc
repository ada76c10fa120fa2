#include "devices/virtio/guest_buffers.h"

#include <algorithm>
#include <cstring>

namespace mvmm::devices::virtio {

void GuestBuffers::append(std::span<uint8_t> part) {
    if (part.empty()) return;
    parts_.push_back(part);
    size_ += part.size();
}

GuestBuffers GuestBuffers::slice(uint64_t offset, uint64_t length) const {
    GuestBuffers out;
    for (auto part : parts_) {
        if (length == 0) break;
        if (offset >= part.size()) {
            offset -= part.size();
            continue;
        }
        auto piece = part.subspan(offset, std::min<uint64_t>(length, part.size() - offset));
        out.append(piece);
        length -= piece.size();
        offset = 0;
    }
    return out;
}

uint64_t GuestBuffers::copy_to(uint64_t offset, std::span<uint8_t> out) const {
    uint64_t copied = 0;
    for (auto piece : slice(offset, out.size()).parts_) {
        // Guest memory may change under us; callers parse only the copy.
        std::memcpy(out.data() + copied, piece.data(), piece.size());
        copied += piece.size();
    }
    return copied;
}

uint64_t GuestBuffers::copy_from(uint64_t offset, std::span<const uint8_t> in) const {
    uint64_t copied = 0;
    for (auto piece : slice(offset, in.size()).parts_) {
        std::memcpy(piece.data(), in.data() + copied, piece.size());
        copied += piece.size();
    }
    return copied;
}

}  // namespace mvmm::devices::virtio
