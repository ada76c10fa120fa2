#include "devices/block/qcow2/refcounts.h"

#include <algorithm>

#include "devices/block/qcow2/header.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using Value = Result<uint64_t, std::error_code>;

Unexpected<std::error_code> fail(std::errc error = std::errc::io_error) {
    return Unexpected{std::make_error_code(error)};
}

}  // namespace

Refcounts::Refcounts(const ImageFile& file, const Geometry& geometry, uint64_t table_offset,
                     std::vector<uint64_t> table, TableCache& blocks, uint64_t file_size)
    : file_(file),
      geometry_(geometry),
      table_offset_(table_offset),
      table_(std::move(table)),
      blocks_(blocks),
      used_end_(file.fixed_size()
                    ? (table_offset + table_.size() * 8 + geometry.cluster_size() - 1) >>
                          geometry.cluster_bits
                    : (file_size + geometry.cluster_size() - 1) >> geometry.cluster_bits),
      device_end_(file.fixed_size() ? file_size >> geometry.cluster_bits : 0) {}

uint64_t Refcounts::max_clusters() const {
    if (device_end_) return device_end_;
    return (kOffsetMask + (uint64_t{1} << 9)) >> geometry_.cluster_bits;  // offsets below 2^56
}

bool Refcounts::has_block(uint64_t cluster) const {
    const uint64_t block = cluster / geometry_.refcounts_per_block();
    return block < table_.size() && (table_[block] & kRefcountTableOffsetMask) != 0;
}

Value Refcounts::get(uint64_t cluster) {
    if (!has_block(cluster)) return uint64_t{0};
    const uint64_t per_block = geometry_.refcounts_per_block();
    auto block = blocks_.get(table_[cluster / per_block] & kRefcountTableOffsetMask);
    if (!block) return Unexpected{block.error()};
    return get_refcount(block->bytes(), cluster % per_block, geometry_.refcount_order);
}

Result<bool, std::error_code> Refcounts::in_use(uint64_t offset, uint64_t bytes) {
    for (uint64_t c = offset >> geometry_.cluster_bits;
         c <= (offset + bytes - 1) >> geometry_.cluster_bits; ++c) {
        auto count = get(c);
        if (!count) return Unexpected{count.error()};
        if (*count == 0) return false;
    }
    return true;
}

Value Refcounts::update(uint64_t cluster, int delta) {
    if (!has_block(cluster)) return fail();  // a reference to a cluster nobody counted
    const uint64_t per_block = geometry_.refcounts_per_block();
    auto block = blocks_.get(table_[cluster / per_block] & kRefcountTableOffsetMask);
    if (!block) return Unexpected{block.error()};
    const uint64_t index = cluster % per_block;
    const uint64_t value = get_refcount(block->bytes(), index, geometry_.refcount_order);
    if (delta < 0 && value == 0) return fail();  // underflow: the image is corrupt
    if (delta > 0 && value == geometry_.refcount_max()) return fail();  // overflow
    const uint64_t updated = delta < 0 ? value - 1 : value + 1;
    set_refcount(block->bytes(), index, geometry_.refcount_order, updated);
    block->mark_dirty();
    return updated;
}

Value Refcounts::find_free(uint64_t from) {
    const uint64_t per_block = geometry_.refcounts_per_block();
    for (uint64_t c = from;;) {
        if (c >= max_clusters()) return fail(std::errc::no_space_on_device);
        const uint64_t block_end = (c / per_block + 1) * per_block;
        if (!has_block(c)) {  // no block yet: none of its clusters has a reference
            for (; c < block_end; ++c)
                if (!quarantine_.contains(c)) return c;
            continue;
        }
        auto block = blocks_.get(table_[c / per_block] & kRefcountTableOffsetMask);
        if (!block) return Unexpected{block.error()};
        for (; c < block_end; ++c) {
            if (get_refcount(block->bytes(), c % per_block, geometry_.refcount_order) == 0 &&
                !quarantine_.contains(c))
                return c;
        }
    }
}

Result<bool, std::error_code> Refcounts::is_free(uint64_t cluster) {
    if (cluster >= max_clusters() || !has_block(cluster) || quarantine_.contains(cluster))
        return false;  // no block: allocate() makes it first
    auto count = get(cluster);
    if (!count) return Unexpected{count.error()};
    return *count == 0;
}

Result<Refcounts::Allocation, std::error_code> Refcounts::allocate(uint64_t max_count) {
    uint64_t first = 0;
    for (;;) {
        auto found = find_free(hint_);
        if (!found) return Unexpected{found.error()};
        first = *found;
        if (has_block(first)) break;
        // A new refcount block takes the free cluster and describes itself; growing the table
        // places the table and its blocks past everything.  Either way, search again.
        const uint64_t block = first / geometry_.refcounts_per_block();
        auto made = block < table_.size() ? create_block(block, first) : grow_table(block);
        if (!made) return Unexpected{made.error()};
    }
    uint64_t count = 1;
    for (; count < max_count; ++count) {
        auto free = is_free(first + count);
        if (!free) return Unexpected{free.error()};
        if (!*free) break;
    }
    for (uint64_t c = first; c < first + count; ++c) {
        if (auto counted = update(c, +1); !counted) return Unexpected{counted.error()};
    }
    // Like QEMU's free_cluster_index, the search moves on past what it handed out; clusters
    // skipped on the way are found again once a release brings it back.
    hint_ = first + count;
    used_end_ = std::max(used_end_, first + count);
    return Allocation{first << geometry_.cluster_bits, count};
}

IoResult Refcounts::release(uint64_t offset, uint64_t bytes) {
    if (bytes == 0) return Ok{};
    // All or nothing: a reference to a cluster nobody counted changes no refcount.
    auto counted = in_use(offset, bytes);
    if (!counted) return Unexpected{counted.error()};
    if (!*counted) return io_error();
    for (uint64_t c = offset >> geometry_.cluster_bits;
         c <= (offset + bytes - 1) >> geometry_.cluster_bits; ++c) {
        auto left = update(c, -1);
        if (!left) return Unexpected{left.error()};
        if (*left == 0) quarantine_.insert(c);
    }
    return Ok{};
}

IoResult Refcounts::unallocate(uint64_t offset, uint64_t count) {
    const uint64_t first = offset >> geometry_.cluster_bits;
    for (uint64_t c = first; c < first + count; ++c) {
        if (auto left = update(c, -1); !left) return Unexpected{left.error()};
    }
    hint_ = std::min(hint_, first);
    return Ok{};
}

void Refcounts::end_quarantine() {
    for (const uint64_t c : quarantine_) hint_ = std::min(hint_, c);
    quarantine_.clear();
}

IoResult Refcounts::create_block(uint64_t block_index, uint64_t cluster) {
    // Written and synced before the table points at it: until then it is an unused cluster.
    const uint64_t offset = cluster << geometry_.cluster_bits;
    std::vector<uint8_t> block(geometry_.cluster_size());
    set_refcount(block, cluster % geometry_.refcounts_per_block(), geometry_.refcount_order, 1);
    blocks_.forget(offset);
    if (auto r = file_.write(offset, block); !r) return r;
    if (auto r = file_.sync(); !r) return r;
    uint8_t entry[8];
    store_be64(entry, 0, offset);
    if (auto r = file_.write(table_offset_ + block_index * 8, entry); !r) return r;
    if (auto r = file_.sync(); !r) return r;
    table_[block_index] = offset;
    used_end_ = std::max(used_end_, cluster + 1);
    return Ok{};
}

IoResult Refcounts::grow_table(uint64_t block_index) {
    // The new table and the blocks that count it go after everything, where no cluster has a
    // reference nor a block: [area, area + blocks) blocks, then the table.
    const uint64_t per_block = geometry_.refcounts_per_block();
    const uint64_t cs = geometry_.cluster_size();
    const uint64_t area = std::max<uint64_t>(used_end_, table_.size() * per_block);
    uint64_t entries = std::max<uint64_t>(block_index + 1, table_.size() + table_.size() / 2);
    uint64_t blocks = 1, table_clusters = 0;
    for (;;) {
        table_clusters = (entries * 8 + cs - 1) / cs;
        for (;;) {  // the blocks count themselves too: grow to the fixed point
            const uint64_t needed =
                (area + blocks + table_clusters - 1) / per_block - area / per_block + 1;
            if (needed == blocks) break;
            blocks = needed;
        }
        const uint64_t last_block = (area + blocks + table_clusters - 1) / per_block;
        if (last_block < table_clusters * cs / 8) break;
        entries = last_block + 1;
    }
    const uint64_t area_end = area + blocks + table_clusters;
    if (table_clusters * cs > kMaxRefcountTableBytes || area_end > max_clusters())
        return io_error(std::errc::no_space_on_device);

    std::vector<uint8_t> new_blocks(blocks * cs);
    for (uint64_t c = area; c < area + blocks + table_clusters; ++c)
        set_refcount(std::span(new_blocks).subspan((c / per_block - area / per_block) * cs, cs),
                     c % per_block, geometry_.refcount_order, 1);
    std::vector<uint64_t> table = table_;
    table.resize(table_clusters * cs / 8);
    for (uint64_t j = 0; j < blocks; ++j) table[area / per_block + j] = (area + j) * cs;
    std::vector<uint8_t> table_bytes(table_clusters * cs);
    for (size_t i = 0; i < table.size(); ++i) store_be64(table_bytes, i * 8, table[i]);

    const uint64_t table_offset = (area + blocks) * cs;
    if (auto r = file_.write(area * cs, new_blocks); !r) return r;
    if (auto r = file_.write(table_offset, table_bytes); !r) return r;
    if (auto r = file_.sync(); !r) return r;
    // One write switches the header to the new table (offset and cluster count side by side).
    uint8_t fields[12];
    store_be64(fields, 0, table_offset);
    store_be32(fields, 8, static_cast<uint32_t>(table_clusters));
    if (auto r = file_.write(kRefcountTableOffsetField, fields); !r) return r;
    if (auto r = file_.sync(); !r) return r;

    const uint64_t old_offset = table_offset_, old_bytes = table_.size() * 8;
    table_ = std::move(table);
    table_offset_ = table_offset;
    used_end_ = std::max(used_end_, area_end);
    return release(old_offset, old_bytes);  // leaked, not lost, if we crash before this lands
}

}  // namespace mvmm::devices::block::qcow2
