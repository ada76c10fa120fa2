#include "devices/block/qcow2/cluster_map.h"

#include <algorithm>

namespace mvmm::devices::block::qcow2 {
namespace {

// Whether cluster `k` of a run (entry `next`) maps like the run's first cluster.
bool continues(const L2Entry& first, const L2Entry& next, uint64_t k, const Geometry& g) {
    if (next.kind != first.kind || next.copied != first.copied) return false;
    if (first.kind == ClusterKind::Compressed) return false;
    if (first.host_offset == 0) return next.host_offset == 0;
    return next.host_offset == first.host_offset + (k << g.cluster_bits);
}

}  // namespace

ClusterMap::ClusterMap(const ImageFile& file, const Geometry& geometry, uint64_t l1_offset,
                       std::vector<uint64_t> l1, TableCache& l2_cache, TableCache& refcount_cache,
                       Refcounts& refcounts)
    : file_(file),
      geometry_(geometry),
      l1_offset_(l1_offset),
      l1_(std::move(l1)),
      l2_cache_(l2_cache),
      refcount_cache_(refcount_cache),
      refcounts_(refcounts) {}

Result<L2Entry, std::error_code> ClusterMap::checked_entry(std::span<const uint8_t> table,
                                                           uint64_t index, uint64_t clusters) {
    const auto entry = decode_l2_entry(load_be64(table, index * 8), geometry_);
    if (!entry) return Unexpected{std::make_error_code(std::errc::io_error)};
    // The clusters it holds must be ones the file has (a compressed cluster's tail may run
    // past the end: the read stops there).
    const uint64_t end = refcounts_.end();
    const uint64_t bytes =
        entry->kind == ClusterKind::Compressed ? 1 : clusters * geometry_.cluster_size();
    if (entry->host_offset != 0 && (entry->host_offset > end || bytes > end - entry->host_offset))
        return Unexpected{std::make_error_code(std::errc::io_error)};
    return *entry;
}

Result<Extent, std::error_code> ClusterMap::lookup(uint64_t offset, uint64_t length) {
    const Geometry& g = geometry_;
    Extent run;
    run.guest_offset = offset;
    run.length = std::min(length, g.l2_span() - offset % g.l2_span());  // inside one table
    const uint64_t l2_offset = l1_[g.l1_index(offset)] & kOffsetMask;
    if (l2_offset == 0) return run;  // no L2 table: every cluster unallocated

    auto table = l2_cache_.get(l2_offset);
    if (!table) return Unexpected{table.error()};
    const uint64_t first_index = g.l2_index(offset);
    auto first = checked_entry(table->bytes(), first_index, 1);
    if (!first) return Unexpected{first.error()};
    run.first = *first;
    const uint64_t wanted = run.clusters(g);
    uint64_t k = 1;
    for (; k < wanted; ++k) {
        const auto next = decode_l2_entry(load_be64(table->bytes(), (first_index + k) * 8), g);
        if (!next || !continues(run.first, *next, k, g)) break;
    }
    if (run.first.host_offset != 0 && k > 1) {
        if (auto whole = checked_entry(table->bytes(), first_index, k); !whole)
            return Unexpected{whole.error()};
    }
    run.length = std::min(run.length, (k << g.cluster_bits) - g.offset_in_cluster(offset));
    return run;
}

IoResult ClusterMap::prepare_l2(uint64_t offset) {
    const uint64_t index = geometry_.l1_index(offset);
    const uint64_t old = l1_[index] & kOffsetMask;
    if (old != 0 && (l1_[index] & kCopied)) return Ok{};

    auto allocated = refcounts_.allocate(1);
    if (!allocated) return Unexpected{allocated.error()};
    const uint64_t fresh = allocated->offset;
    // Its refcount reaches the file before the table, the table before the L1 entry.
    if (auto flushed = refcount_cache_.flush(); !flushed) return flushed;
    {
        auto table = l2_cache_.get_empty(fresh);
        if (!table) return Unexpected{table.error()};
        if (old != 0) {
            auto shared = l2_cache_.get(old);
            if (!shared) return Unexpected{shared.error()};
            std::ranges::copy(shared->bytes(), table->bytes().begin());
        }
        table->mark_dirty();
    }
    if (auto flushed = l2_cache_.flush(); !flushed) return flushed;
    l1_[index] = fresh | kCopied;
    if (auto written = write_l1_entry(index); !written) return written;
    if (old == 0) return Ok{};
    l2_cache_.forget(old);
    return refcounts_.release(old, geometry_.cluster_size());
}

TableCache::TableResult ClusterMap::l2_table(uint64_t offset) {
    const uint64_t l2_offset = l1_[geometry_.l1_index(offset)] & kOffsetMask;
    if (l2_offset == 0) return Unexpected{std::make_error_code(std::errc::io_error)};  // a bug
    return l2_cache_.get(l2_offset);
}

void ClusterMap::set_entries(TableCache::Table& table, uint64_t offset, uint64_t count,
                             uint64_t entry, uint64_t step) {
    const uint64_t first = geometry_.l2_index(offset);
    for (uint64_t k = 0; k < count; ++k)
        store_be64(table.bytes(), (first + k) * 8, entry + k * step);
    table.mark_dirty();
}

IoResult ClusterMap::write_l1_entry(uint64_t index) {
    uint8_t entry[8];
    store_be64(entry, 0, l1_[index]);
    if (auto written = file_.write(l1_offset_ + index * 8, entry); !written) return written;
    return file_.sync();
}

}  // namespace mvmm::devices::block::qcow2
