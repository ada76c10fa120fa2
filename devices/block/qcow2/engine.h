// One open qcow2 image: its file, its metadata behind one lock, its backing file.
//
// Locking: one mutex guards every table (L1, L2 cache, refcounts, allocator).  Reads and
// writes to clusters the image already owns look the mapping up under it and move the data
// without it.  A write that needs new clusters allocates them under the lock, registers the
// guest clusters as in flight, drops the lock for the copy-on-write reads and the data write,
// and takes it again to point the L2 entries at them; any other request that would change
// those entries waits for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/fd.h"
#include "base/mapping.h"
#include "devices/block/cache_stats.h"
#include "devices/block/qcow2/backing.h"
#include "devices/block/qcow2/cluster_map.h"
#include "devices/block/qcow2/header.h"
#include "devices/block/qcow2/options.h"
#include "devices/block/qcow2/refcounts.h"
#include "devices/block/qcow2/scratch.h"
#include "devices/block/qcow2/table_cache.h"

namespace mvmm::devices::block::qcow2 {

// How many tables each cache holds, from the options (QEMU's read_cache_sizes).
size_t l2_cache_tables(const Qcow2Options& options, const Geometry& geometry,
                       uint64_t virtual_size);
size_t refcount_cache_tables(const Qcow2Options& options, const Geometry& geometry);

class Engine {
  public:
    struct Tables {
        std::vector<uint64_t> l1;
        std::vector<uint64_t> refcount_table;
    };
    Engine(std::unique_ptr<ImageFile> file, const Header& header, Tables tables, uint64_t file_size,
           bool read_only, const Qcow2Options& options, std::unique_ptr<BackingFile> backing);
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // What keeps a checked header from being written to (metadata without references), or
    // nullopt once the image is ready for writes (unknown autoclear bits cleared).
    std::optional<std::string> prepare_for_writes(const Header& header);

    uint64_t size() const { return size_; }
    bool read_only() const { return read_only_; }
    const ImageFile& file() const { return *file_; }

    IoResult read(uint64_t offset, const GuestBuffers& into);
    IoResult write(uint64_t offset, const GuestBuffers& from);
    IoResult flush();
    IoResult discard(uint64_t offset, uint64_t length);
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap);

    size_t clean_idle(std::chrono::steady_clock::time_point now);
    std::chrono::seconds clean_interval() const noexcept { return clean_interval_; }
    void add_stats(CacheStats& stats) const;

  private:
    using Lock = std::unique_lock<std::mutex>;
    // Guest clusters [begin, end) (byte offsets) a write is filling, without the lock: their
    // L2 entries stay as they are until it is done.
    struct InFlight {
        uint64_t id;
        uint64_t begin;
        uint64_t end;
    };
    // What zeroing a run's clusters changes: the new entry, and whether the old clusters lose
    // their reference (nullopt: leave the run alone).
    struct ZeroPlan {
        uint64_t entry;
        bool release;
    };
    enum class ZeroMode { Discard, WriteZeroes, WriteZeroesUnmap };

    IoResult check_range(uint64_t offset, uint64_t length) const;
    // `scratch`: the caller's lease, for a compressed run (else one is taken).
    IoResult read_extent(const Extent& run, uint64_t guest, const GuestBuffers& into,
                         const ScratchPool::Lease* scratch = nullptr);
    IoResult read_compressed(const L2Entry& entry, uint64_t in_cluster, const GuestBuffers& into,
                             const ScratchPool::Lease& scratch);
    IoResult read_backing(uint64_t guest, const GuestBuffers& into);
    bool in_flight(uint64_t begin, uint64_t end) const;
    uint64_t enter_flight(const Extent& run);
    void leave_flight(uint64_t id);

    Result<uint64_t, std::error_code> write_run(uint64_t offset, const GuestBuffers& from);
    Result<uint64_t, std::error_code> allocate_run(Lock& lock, Extent run,
                                                   const GuestBuffers& from);
    IoResult link(const Extent& run, uint64_t host);
    IoResult replace_entries(const Extent& run, uint64_t entry, uint64_t step, bool release_old);
    IoResult write_zero_bytes(uint64_t offset, uint64_t length);
    std::optional<ZeroPlan> zero_plan(const Extent& run, ZeroMode mode) const;
    IoResult zero_clusters(uint64_t begin, uint64_t end, ZeroMode mode);
    Result<uint64_t, std::error_code> zero_run(uint64_t offset, uint64_t end, ZeroMode mode);
    IoResult flush_metadata();

    std::unique_ptr<ImageFile> file_;
    Geometry geometry_;
    uint64_t size_;
    bool read_only_;
    std::unique_ptr<BackingFile> backing_;
    std::chrono::seconds clean_interval_;

    mutable std::mutex mutex_;
    std::condition_variable allocation_done_;
    TableCache l2_cache_;
    TableCache refcount_cache_;
    Refcounts refcounts_;
    ClusterMap map_;
    std::vector<InFlight> in_flight_;
    ScratchPool scratch_;  // taken without mutex_
    uint64_t flights_ = 0;
    std::optional<std::chrono::steady_clock::time_point> last_clean_;
    bool flush_failed_ = false;
    // What write-zeroes writes where the zero flag cannot say it: a read-only anonymous
    // mapping (the kernel's zero page, no memory), made at open for a writable image.
    Mapping zeroes_;
};

}  // namespace mvmm::devices::block::qcow2
