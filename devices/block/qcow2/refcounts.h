// Host cluster reference counts and the cluster allocator built on them.  The refcount table
// lives in memory as on disk; refcount blocks go through their cache.  New refcount blocks and
// a grown refcount table are written (and synced) before anything points at them, so a crash
// at any moment leaves at worst leaked clusters.
//
// Clusters whose last reference was dropped are held back from reuse (quarantined) until the
// owner has written the L2 tables that dropped them: until then the file may still point at
// them, and new data there would show through after a crash.
//
// Not thread-safe: the image's metadata lock guards it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/format.h"
#include "devices/block/qcow2/table_cache.h"

namespace mvmm::devices::block::qcow2 {

class Refcounts {
  public:
    // `table` in host order, each entry checked (parse_refcount_table); `file_size` in bytes.
    Refcounts(const ImageFile& file, const Geometry& geometry, uint64_t table_offset,
              std::vector<uint64_t> table, TableCache& blocks, uint64_t file_size);

    Result<uint64_t, std::error_code> get(uint64_t cluster);
    // Whether every cluster overlapping [offset, offset + bytes) has a reference.
    Result<bool, std::error_code> in_use(uint64_t offset, uint64_t bytes);

    // Free clusters, contiguous, each with one reference now: the first free cluster and as
    // many after it as are free, up to `max_count`.  Grows the refcount structures as needed.
    struct Allocation {
        uint64_t offset;  // bytes
        uint64_t count;   // clusters, at least one
    };
    Result<Allocation, std::error_code> allocate(uint64_t max_count);
    // One reference fewer for each cluster overlapping [offset, offset + bytes) (none when one
    // of them has no reference: EIO); those left with none are quarantined.
    IoResult release(uint64_t offset, uint64_t bytes);
    // Takes back allocate()'s `count` clusters at `offset` that nothing points at.
    IoResult unallocate(uint64_t offset, uint64_t count);

    bool quarantine_full() const { return quarantine_.size() >= kMaxQuarantine; }
    // The L2 tables that dropped the quarantined clusters are on disk: reuse them.
    void end_quarantine();

    // Bytes: no cluster in use or allocated lies past it (on a block device: its end).
    uint64_t end() const { return std::max(used_end_, device_end_) << geometry_.cluster_bits; }

  private:
    static constexpr size_t kMaxQuarantine = 1 << 16;

    Result<uint64_t, std::error_code> update(uint64_t cluster, int delta);
    bool has_block(uint64_t cluster) const;
    Result<uint64_t, std::error_code> find_free(uint64_t from);
    Result<bool, std::error_code> is_free(uint64_t cluster);
    IoResult create_block(uint64_t block_index, uint64_t cluster);
    IoResult grow_table(uint64_t block_index);
    uint64_t max_clusters() const;

    const ImageFile& file_;
    Geometry geometry_;
    uint64_t table_offset_;
    std::vector<uint64_t> table_;
    TableCache& blocks_;
    // Clusters.  Nothing in use lies at or past used_end_ but what the table counts, so a
    // grown table may go there.  At first a file's end; a block device's end says nothing of
    // what is in use, and everything in use is counted (the refcount table too, in a sound
    // image), so there the refcount table's end.
    uint64_t used_end_;
    const uint64_t device_end_;  // a block device's size, 0 for a file (which grows)
    uint64_t hint_ = 1;          // where the search for free clusters starts (0 is the header)
    std::unordered_set<uint64_t> quarantine_;
};

}  // namespace mvmm::devices::block::qcow2
