// Guest RAM: a set of host mappings placed at guest-physical addresses.  All access from
// outside mem/ goes through the checked accessors below and the GuestSlice they hand out, so
// no raw pointer into guest memory escapes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/mapping.h"
#include "base/result.h"
#include "mem/guest_addr.h"
#include "mem/guest_slice.h"

namespace mvmm {

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
    Result<GuestSlice, MemError> slice(GuestAddr addr, uint64_t len) const;

    Result<Ok, MemError> read_bytes(GuestAddr addr, std::span<uint8_t> out) const;
    Result<Ok, MemError> write_bytes(GuestAddr addr, std::span<const uint8_t> in) const;

    template <class T>
    Result<T, MemError> read(GuestAddr addr) const {
        auto s = slice(addr, sizeof(T));
        if (!s) return Unexpected{s.error()};
        return s->read_obj<T>(0);
    }
    template <class T>
    Result<Ok, MemError> write(GuestAddr addr, const T& v) const {
        auto s = slice(addr, sizeof(T));
        if (!s) return Unexpected{s.error()};
        return s->write_obj(0, v);
    }

    bool contains(GuestAddr addr, uint64_t len) const { return slice(addr, len).ok(); }
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
