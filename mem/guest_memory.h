// Guest RAM: a set of host mappings placed at guest-physical addresses.  All access from
// outside mem/ goes through the checked accessors below, so no raw pointer into guest
// memory escapes unchecked.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mem/guest_addr.h"
#include "mem/mapping.h"
#include "mem/result.h"

namespace mvmm {

enum class MemError {
    Overflow,    // start + length wraps around
    OutOfRange,  // not entirely inside one RAM region
};
std::string_view to_string(MemError e);

struct RamRegion {
    GuestAddr base;
    Mapping mapping;
    uint64_t size() const noexcept { return mapping.size(); }
    GuestAddr end() const noexcept { return base + size(); }  // one past the last byte
};

class GuestMemory {
  public:
    // Regions must not overlap; they are kept sorted by base.
    explicit GuestMemory(std::vector<RamRegion> regions);

    // A view of [addr, addr + len); fails unless the whole range is in one region.
    Result<std::span<uint8_t>, MemError> span(GuestAddr addr, uint64_t len) const;

    Result<Ok, MemError> read_bytes(GuestAddr addr, std::span<uint8_t> out) const;
    Result<Ok, MemError> write_bytes(GuestAddr addr, std::span<const uint8_t> in) const;

    template <class T>
    Result<T, MemError> read(GuestAddr addr) const {
        static_assert(std::is_trivially_copyable_v<T>);
        T v;
        auto r = read_bytes(addr, {reinterpret_cast<uint8_t*>(&v), sizeof v});
        if (!r) return Unexpected{r.error()};
        return v;
    }
    template <class T>
    Result<Ok, MemError> write(GuestAddr addr, const T& v) const {
        static_assert(std::is_trivially_copyable_v<T>);
        return write_bytes(addr, {reinterpret_cast<const uint8_t*>(&v), sizeof v});
    }

    bool contains(GuestAddr addr, uint64_t len) const { return span(addr, len).ok(); }
    const std::vector<RamRegion>& regions() const noexcept { return regions_; }
    uint64_t total_size() const noexcept;
    // Bytes of guest RAM backed by host memory now (mincore), for memory reports.
    uint64_t resident_bytes() const;

    // Registers every region as a KVM memory slot of the VM `vm_fd`.
    void register_with_kvm(int vm_fd) const;

  private:
    std::vector<RamRegion> regions_;
};

}  // namespace mvmm
