// Guest clusters to host clusters: the L1 table (in memory, as on disk) and the L2 tables
// (through their cache).  Lookups return runs of clusters that map alike, so a sequential
// request costs one lookup per L2 table, not one per cluster.
//
// Not thread-safe: the image's metadata lock guards it.
#pragma once

#include <cstdint>
#include <vector>

#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/format.h"
#include "devices/block/qcow2/refcounts.h"
#include "devices/block/qcow2/table_cache.h"

namespace mvmm::devices::block::qcow2 {

// Guest bytes [guest_offset, guest_offset + length) in consecutive clusters of one L2 table
// whose entries agree: same kind and copied flag and, where they hold host clusters,
// consecutive ones.  A compressed cluster is a run of its own.
struct Extent {
    uint64_t guest_offset = 0;
    uint64_t length = 0;
    L2Entry first;  // the entry of the run's first cluster

    bool in_place() const { return first.kind == ClusterKind::Data && first.copied; }
    // The first cluster's guest offset.
    uint64_t cluster_start(const Geometry& g) const { return g.cluster_start(guest_offset); }
    // Where guest byte `guest` of the run lies in the file (Data, or Zero with a cluster).
    uint64_t host_offset(const Geometry& g, uint64_t guest) const {
        return first.host_offset + (guest - cluster_start(g));
    }
    // The run's clusters, from the first to the one holding its last byte.
    uint64_t clusters(const Geometry& g) const {
        return (g.offset_in_cluster(guest_offset) + length + g.cluster_size() - 1) >>
               g.cluster_bits;
    }
};

class ClusterMap {
  public:
    // `l1` in host order, each entry checked (parse_l1_table).
    ClusterMap(const ImageFile& file, const Geometry& geometry, uint64_t l1_offset,
               std::vector<uint64_t> l1, TableCache& l2_cache, TableCache& refcount_cache,
               Refcounts& refcounts);

    // The run from guest `offset`, at most `length` bytes: EIO for an entry no correct image
    // holds, or one that points past the clusters the file has.
    Result<Extent, std::error_code> lookup(uint64_t offset, uint64_t length);

    // Makes the L2 table of guest `offset` one that entries may be written to: allocated, or
    // copied when shared (refcount above one, as internal snapshots leave them).  Writes it and
    // the L1 entry before returning, as QEMU's l2_allocate does.
    IoResult prepare_l2(uint64_t offset);
    // The prepared L2 table that maps guest `offset`, pinned.
    TableCache::TableResult l2_table(uint64_t offset);
    // Sets the entries of `count` guest clusters from `offset` (cluster aligned, all in
    // `table`) to `entry`, `entry + step`, `entry + 2 * step`...
    void set_entries(TableCache::Table& table, uint64_t offset, uint64_t count, uint64_t entry,
                     uint64_t step);

  private:
    Result<L2Entry, std::error_code> checked_entry(std::span<const uint8_t> table, uint64_t index,
                                                   uint64_t clusters);
    IoResult write_l1_entry(uint64_t index);

    const ImageFile& file_;
    Geometry geometry_;
    uint64_t l1_offset_;
    std::vector<uint64_t> l1_;
    TableCache& l2_cache_;
    TableCache& refcount_cache_;
    Refcounts& refcounts_;
};

}  // namespace mvmm::devices::block::qcow2
