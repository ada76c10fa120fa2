// A cache of one-cluster metadata tables (L2 tables or refcount blocks) of one image file:
// least recently used tables make room for new ones, dirty tables are written back when they
// leave or on flush, and a cache may depend on another (QEMU's qcow2_cache_set_dependency):
// before any of its dirty tables is written, the other cache is written and the file synced.
// That is how the on-disk order of metadata updates is kept: refcounts before the L2 entries
// that use them, cleared L2 entries before the refcounts that drop them.
//
// Not thread-safe: the image's metadata lock guards it.  Tables stay as on disk (big endian).
#pragma once

#include <cstdint>
#include <span>
#include <system_error>
#include <vector>

#include "devices/block/cache_stats.h"
#include "devices/block/qcow2/cache_memory.h"
#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/offset_index.h"
#include "devices/block/qcow2/options.h"

namespace mvmm::devices::block::qcow2 {

class TableCache {
  public:
    // Throws std::system_error when the mapping cannot be made.
    TableCache(const ImageFile& file, size_t table_size, size_t capacity, CacheAlloc alloc);
    TableCache(const TableCache&) = delete;
    TableCache& operator=(const TableCache&) = delete;

    // A cached table, pinned while the handle lives (it cannot be replaced under it).
    class Table {
      public:
        Table(Table&& other) noexcept
            : cache_(std::exchange(other.cache_, nullptr)), slot_(other.slot_) {}
        Table& operator=(Table&&) = delete;
        ~Table();
        std::span<uint8_t> bytes() const { return cache_->memory_.table(slot_); }
        uint64_t offset() const { return cache_->entries_[slot_].offset; }
        void mark_dirty() { cache_->entries_[slot_].dirty = true; }

      private:
        friend class TableCache;
        Table(TableCache* cache, uint32_t slot);
        TableCache* cache_;
        uint32_t slot_;
    };
    using TableResult = Result<Table, std::error_code>;

    // The table at file `offset`, read on a miss.
    TableResult get(uint64_t offset);
    // A new table for a freshly allocated cluster at `offset`: zeroes, not read.
    TableResult get_empty(uint64_t offset);
    // The table at `offset` is freed: dropped, dirty or not.  It must not be pinned.
    void forget(uint64_t offset);

    // From now until it is next written, this cache's tables reach the file only after every
    // dirty table of `dependency` did and the file was synced.
    IoResult set_dependency(TableCache& dependency);
    // Writes every dirty table (after its dependency); no sync.
    IoResult write_dirty();
    // write_dirty(), then fdatasync.
    IoResult flush();
    // Drops the clean, unpinned tables nobody used since the previous call and returns their
    // pages (QEMU's qcow2_cache_clean_unused); returns how many were dropped.
    size_t clean_unused();

    CacheStats::Cache stats() const;

  private:
    static constexpr uint64_t kNoTable = ~uint64_t{0};
    static constexpr uint32_t kNil = ~uint32_t{0};
    struct Entry {
        uint64_t offset = kNoTable;
        uint32_t pins = 0;
        bool dirty = false;
        bool used = false;  // since the previous clean_unused()
        uint32_t newer = kNil;
        uint32_t older = kNil;
    };

    Result<uint32_t, std::error_code> take_slot();
    void install(uint32_t slot, uint64_t offset);
    void remove(uint32_t slot);
    void link_newest(uint32_t slot);
    void unlink(uint32_t slot);
    IoResult write_entry(uint32_t slot);
    IoResult flush_dependency();

    const ImageFile& file_;
    CacheMemory memory_;
    std::vector<Entry> entries_;  // one per slot
    std::vector<uint32_t> free_slots_;
    OffsetIndex index_;
    uint32_t newest_ = kNil;
    uint32_t oldest_ = kNil;
    TableCache* depends_on_ = nullptr;
    CacheStats::Cache counters_;  // hits, misses, evictions, cleanings
};

}  // namespace mvmm::devices::block::qcow2
