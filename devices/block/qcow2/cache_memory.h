// The memory of one metadata cache: `slots` tables of `table_size` bytes, in one of two
// layouts (CacheAlloc).  Mapping: one anonymous mapping carved into slots, touched only when a
// table is loaded, pages given back with MADV_DONTNEED when whole runs of slots fall idle; it
// allocates nothing per table.  Heap: one aligned allocation per table, made when a table is
// loaded and freed when it leaves the cache, as QEMU did before 2015.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "base/mapping.h"
#include "devices/block/qcow2/options.h"

namespace mvmm::devices::block::qcow2 {

class CacheMemory {
  public:
    // Throws std::system_error when the mapping cannot be made.
    CacheMemory(CacheAlloc alloc, size_t table_size, size_t slots);

    CacheAlloc alloc() const noexcept { return alloc_; }
    size_t table_size() const noexcept { return table_size_; }

    // The table in `slot`, made present (heap: allocated); empty when out of memory.
    std::span<uint8_t> hold(size_t slot);
    // The table of a held slot.
    std::span<uint8_t> table(size_t slot) const;
    // The slot's table left the cache (heap: freed).
    void drop(size_t slot);
    // Slots [first, first + count), all dropped, fell idle: the pages wholly inside them go
    // back to the kernel (mapping).
    void give_back(size_t first, size_t count);

    uint64_t bytes_allocated() const;
    uint64_t bytes_resident() const;

  private:
    struct Free {
        void operator()(uint8_t* p) const noexcept { std::free(p); }
    };

    CacheAlloc alloc_;
    size_t table_size_;
    Mapping mapping_;                                     // CacheAlloc::Mapping
    std::vector<std::unique_ptr<uint8_t, Free>> tables_;  // CacheAlloc::Heap, one per slot
    size_t held_ = 0;
};

}  // namespace mvmm::devices::block::qcow2
