#include "mem/guest_slice.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace mvmm {

std::string_view to_string(MemError e) {
    switch (e) {
        case MemError::Overflow:
            return "address range wraps around";
        case MemError::OutOfRange:
            return "address range is not guest RAM";
    }
    return "unknown memory error";
}

Result<GuestSlice, MemError> GuestSlice::subslice(uint64_t offset, uint64_t length) const {
    if (auto inside = check(offset, length); !inside) return Unexpected{inside.error()};
    GuestSlice out;
    out.data_ = data_ + offset;
    out.size_ = length;
    return out;
}

Result<Ok, MemError> GuestSlice::copy_to(uint64_t offset, std::span<uint8_t> out) const {
    if (auto inside = check(offset, out.size()); !inside) return inside;
    if (out.empty()) return Ok{};  // memcpy wants real pointers, even for nothing
    std::memcpy(out.data(), data_ + offset, out.size());
    // The copy is a snapshot: the compiler may not turn a later read of it back into a read
    // of guest memory, which the guest may have changed in between.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    return Ok{};
}

Result<Ok, MemError> GuestSlice::copy_from(uint64_t offset, std::span<const uint8_t> in) const {
    if (auto inside = check(offset, in.size()); !inside) return inside;
    if (!in.empty()) std::memcpy(data_ + offset, in.data(), in.size());
    return Ok{};
}

bool GuestSlice::aligned(uint64_t alignment) const noexcept {
    return reinterpret_cast<uintptr_t>(data_) % alignment == 0;
}

void GuestSlice::bad_field(uint64_t offset) {
    throw std::out_of_range("guest ring field at offset " + std::to_string(offset) +
                            " is outside its slice or misaligned");
}

}  // namespace mvmm
