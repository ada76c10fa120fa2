#include "devices/block/qcow2/engine.h"

#include <sys/mman.h>

#include <algorithm>

#include "devices/block/qcow2/compressed.h"

namespace mvmm::devices::block::qcow2 {
namespace {

// Requests of one image that copy-on-write or inflate at once; more wait for a slot.
constexpr uint32_t kScratchSlots = 8;

}  // namespace

size_t l2_cache_tables(const Qcow2Options& options, const Geometry& geometry,
                       uint64_t virtual_size) {
    // QEMU: the cache covers the whole disk, up to l2-cache-size.
    const uint64_t clusters =
        virtual_size / geometry.cluster_size() + (virtual_size % geometry.cluster_size() != 0);
    const uint64_t whole_disk = (clusters + geometry.l2_entries() - 1) / geometry.l2_entries();
    return std::max<uint64_t>(std::min(whole_disk, options.l2_cache_size / geometry.cluster_size()),
                              kMinL2CacheTables);
}

size_t refcount_cache_tables(const Qcow2Options& options, const Geometry& geometry) {
    return std::max<uint64_t>(options.refcount_cache_size / geometry.cluster_size(),
                              kMinRefcountCacheTables);
}

Engine::Engine(std::unique_ptr<ImageFile> file, const Header& header, Tables tables,
               uint64_t file_size, bool read_only, const Qcow2Options& options,
               std::unique_ptr<BackingFile> backing)
    : file_(std::move(file)),
      geometry_(header.geometry),
      size_(header.size / kSectorSize * kSectorSize),
      read_only_(read_only),
      backing_(std::move(backing)),
      clean_interval_(options.cache_clean_interval),
      l2_cache_(*file_, geometry_.cluster_size(), l2_cache_tables(options, geometry_, header.size),
                options.cache_alloc),
      refcount_cache_(*file_, geometry_.cluster_size(), refcount_cache_tables(options, geometry_),
                      options.cache_alloc),
      refcounts_(*file_, geometry_, header.refcount_table_offset, std::move(tables.refcount_table),
                 refcount_cache_, file_size),
      map_(*file_, geometry_, header.l1_table_offset, std::move(tables.l1), l2_cache_,
           refcount_cache_, refcounts_),
      scratch_(geometry_.cluster_size(), file_->alignment(), kScratchSlots) {
    if (read_only_) return;
    constexpr size_t kZeroBytes = 1 << 20;
    void* zeroes = ::mmap(nullptr, kZeroBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (zeroes == MAP_FAILED) throw_errno("mmap of zeroes");
    zeroes_ = Mapping(zeroes, kZeroBytes);
}

std::optional<std::string> Engine::prepare_for_writes(const Header& header) {
    const Lock lock(mutex_);
    // Allocation trusts the refcounts: metadata they say is free would be handed out.
    struct Area {
        const char* name;
        uint64_t offset, bytes;
    };
    const Area areas[] = {
        {"header", 0, geometry_.cluster_size()},
        {"L1 table", header.l1_table_offset, uint64_t{header.l1_size} * 8},
        {"refcount table", header.refcount_table_offset,
         uint64_t{header.refcount_table_clusters} * geometry_.cluster_size()},
    };
    for (const Area& area : areas) {
        if (area.bytes == 0) continue;
        auto used = refcounts_.in_use(area.offset, area.bytes);
        if (!used) return "cannot read its refcounts: " + used.error().message();
        if (!*used)
            return std::string("its refcounts say the ") + area.name +
                   " is free: repair it with qemu-img check -r all";
    }
    // "An implementation may only write to an image with unknown auto-clear features if it
    // clears the respective bits from this field first" (the spec): we know none.
    if (header.autoclear_features != 0) {
        uint8_t zero[8] = {};
        if (!file_->write(kAutoclearFeaturesField, zero) || !file_->sync())
            return "cannot clear its autoclear features";
    }
    return std::nullopt;
}

IoResult Engine::check_range(uint64_t offset, uint64_t length) const {
    if (offset > size_ || length > size_ - offset) return io_error(std::errc::invalid_argument);
    return Ok{};
}

IoResult Engine::read(uint64_t offset, const GuestBuffers& into) {
    if (auto in_range = check_range(offset, into.size()); !in_range) return in_range;
    for (uint64_t done = 0; done < into.size();) {
        Result<Extent, std::error_code> run = [&] {
            const Lock lock(mutex_);
            return map_.lookup(offset + done, into.size() - done);
        }();
        if (!run) return Unexpected{run.error()};
        if (auto read = read_extent(*run, offset + done, into.slice(done, run->length)); !read)
            return read;
        done += run->length;
    }
    return Ok{};
}

IoResult Engine::read_extent(const Extent& run, uint64_t guest, const GuestBuffers& into,
                             const ScratchPool::Lease* scratch) {
    if (into.empty()) return Ok{};
    switch (run.first.kind) {
        case ClusterKind::Unallocated:
            return read_backing(guest, into);
        case ClusterKind::Zero:
            fill_zero(into);
            return Ok{};
        case ClusterKind::Data:
            return file_->read(run.host_offset(geometry_, guest), into);
        case ClusterKind::Compressed: {
            const uint64_t in_cluster = geometry_.offset_in_cluster(guest);
            if (scratch) return read_compressed(run.first, in_cluster, into, *scratch);
            const ScratchPool::Lease lease = scratch_.acquire();
            return read_compressed(run.first, in_cluster, into, lease);
        }
    }
    return io_error();
}

IoResult Engine::read_compressed(const L2Entry& entry, uint64_t in_cluster,
                                 const GuestBuffers& into, const ScratchPool::Lease& scratch) {
    // Bounded by the descriptor: at most two clusters in, read as the aligned blocks around
    // them (O_DIRECT), one cluster out.
    const uint64_t alignment = file_->alignment();
    const uint64_t start = entry.host_offset / alignment * alignment;
    const uint64_t skip = entry.host_offset - start;
    const uint64_t span = (skip + entry.compressed_bytes + alignment - 1) / alignment * alignment;
    if (span > scratch.compressed().size()) return io_error();
    auto got = file_->read_to_end(start, scratch.compressed().first(span));
    if (!got) return Unexpected{got.error()};
    const uint64_t bytes = *got > skip ? std::min(*got - skip, entry.compressed_bytes) : 0;
    const std::span<uint8_t> cluster = scratch.cluster().first(geometry_.cluster_size());
    if (auto inflated = inflate_cluster(scratch.compressed().subspan(skip, bytes), cluster);
        !inflated)
        return inflated;
    into.copy_from(0, cluster.subspan(in_cluster, into.size()));
    return Ok{};
}

IoResult Engine::read_backing(uint64_t guest, const GuestBuffers& into) {
    uint64_t covered = 0;  // what lies inside the backing file; the rest reads as zeroes
    if (backing_ && guest < backing_->size()) {
        covered = std::min(into.size(), backing_->size() - guest);
        if (auto read = backing_->read(guest, into.slice(0, covered)); !read) return read;
    }
    fill_zero(into.slice(covered, into.size()));
    return Ok{};
}

IoResult Engine::flush_metadata() {
    // L2 tables first (their dependency writes the refcounts they need before them), then the
    // refcounts (after the L2 tables that dropped references, if they wait for them).
    if (auto written = l2_cache_.write_dirty(); !written) return written;
    if (auto written = refcount_cache_.write_dirty(); !written) return written;
    if (auto synced = file_->sync(); !synced) return synced;
    refcounts_.end_quarantine();
    return Ok{};
}

IoResult Engine::flush() {
    if (read_only_) return Ok{};
    const Lock lock(mutex_);
    // The kernel reports a failed write-back once: after a failure no flush may succeed.
    if (flush_failed_) return io_error();
    auto flushed = flush_metadata();
    if (!flushed) flush_failed_ = true;
    return flushed;
}

size_t Engine::clean_idle(std::chrono::steady_clock::time_point now) {
    size_t cleaned = 0;
    if (clean_interval_.count() > 0) {
        const Lock lock(mutex_);
        if (!last_clean_ || now - *last_clean_ >= clean_interval_) {
            // The first call starts the clock: it only marks every table unused.
            cleaned = l2_cache_.clean_unused() + refcount_cache_.clean_unused();
            last_clean_ = now;
        }
    }
    if (backing_) cleaned += backing_->clean_idle(now);
    return cleaned;
}

void Engine::add_stats(CacheStats& stats) const {
    {
        const Lock lock(mutex_);
        stats.l2 += l2_cache_.stats();
        stats.refcount += refcount_cache_.stats();
    }
    if (backing_) backing_->add_stats(stats);
}

}  // namespace mvmm::devices::block::qcow2
