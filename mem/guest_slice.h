// A bounds-checked view of guest memory that hands out copies, never references.  The guest
// may change its memory at any moment, so device code copies a header, CDB or descriptor out
// and parses the copy; the type offers nothing else to parse.  Ring fields shared with the
// driver are read and written by atomic loads and stores.  The one raw address that leaves
// mem/ is as_iovec(), for preadv/pwritev: handed to the kernel, never dereferenced by device
// code.  (The idea is rust-vmm vm-memory's VolatileSlice.)
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "base/result.h"

namespace mvmm {

enum class MemError {
    Overflow,    // start + length wraps around
    OutOfRange,  // not entirely inside one RAM region, or inside the slice
};
std::string_view to_string(MemError e);

class GuestSlice {
  public:
    GuestSlice() = default;
    // `bytes` seen as guest memory: guest RAM (GuestMemory::slice makes these), or a host
    // buffer that takes the same I/O path (zeroes to write, tests).  It must outlive the slice.
    explicit GuestSlice(std::span<uint8_t> bytes) noexcept
        : data_(bytes.data()), size_(bytes.size()) {}

    uint64_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    // The same bytes: which buffer a view is of, for tests.
    bool operator==(const GuestSlice&) const = default;

    // Bytes [offset, offset + length) of this slice.
    Result<GuestSlice, MemError> subslice(uint64_t offset, uint64_t length) const;

    // Copy [offset, offset + out.size()) out, or in.size() bytes in; all or nothing.
    Result<Ok, MemError> copy_to(uint64_t offset, std::span<uint8_t> out) const;
    Result<Ok, MemError> copy_from(uint64_t offset, std::span<const uint8_t> in) const;

    template <class T>
    Result<T, MemError> read_obj(uint64_t offset) const {
        static_assert(std::is_trivially_copyable_v<T>);
        T value;
        auto copied = copy_to(offset, {reinterpret_cast<uint8_t*>(&value), sizeof value});
        if (!copied) return Unexpected{copied.error()};
        return value;
    }
    template <class T>
    Result<Ok, MemError> write_obj(uint64_t offset, const T& value) const {
        static_assert(std::is_trivially_copyable_v<T>);
        return copy_from(offset, {reinterpret_cast<const uint8_t*>(&value), sizeof value});
    }

    // Whether the first byte's host address is a multiple of `alignment` (a set-up check for
    // rings, whose fields load() and store() need naturally aligned).
    bool aligned(uint64_t alignment) const noexcept;

    // A 16- or 32-bit ring field shared with the driver, at a naturally aligned offset.  The
    // offsets are mvmm's own, from a layout checked at set-up, so a bad one is a bug: throws
    // std::out_of_range.
    template <class T>
    T load(uint64_t offset, std::memory_order order) const {
        return field<T>(offset).load(order);
    }
    template <class T>
    void store(uint64_t offset, T value, std::memory_order order) const {
        field<T>(offset).store(value, order);
    }

    // For preadv/pwritev only: the kernel moves the bytes; device code never dereferences it.
    iovec as_iovec() const noexcept { return {data_, size_}; }

  private:
    // Whether [offset, offset + length) lies in the slice, wrap-around included.
    Result<Ok, MemError> check(uint64_t offset, uint64_t length) const {
        uint64_t end;
        if (__builtin_add_overflow(offset, length, &end)) return Unexpected{MemError::Overflow};
        if (end > size_) return Unexpected{MemError::OutOfRange};
        return Ok{};
    }
    [[noreturn]] static void bad_field(uint64_t offset);

    template <class T>
    std::atomic_ref<T> field(uint64_t offset) const {
        static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t>);
        static_assert(std::atomic_ref<T>::is_always_lock_free);
        static_assert(std::atomic_ref<T>::required_alignment == sizeof(T));
        if (!check(offset, sizeof(T)) || (reinterpret_cast<uintptr_t>(data_) + offset) % sizeof(T))
            bad_field(offset);
        return std::atomic_ref<T>(*reinterpret_cast<T*>(data_ + offset));
    }

    uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace mvmm
