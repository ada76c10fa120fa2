#include "devices/block/qcow2/table_cache.h"

#include <algorithm>

namespace mvmm::devices::block::qcow2 {

TableCache::Table::Table(TableCache* cache, uint32_t slot) : cache_(cache), slot_(slot) {
    ++cache_->entries_[slot_].pins;
}

TableCache::Table::~Table() {
    if (cache_) --cache_->entries_[slot_].pins;
}

TableCache::TableCache(const ImageFile& file, size_t table_size, size_t capacity, CacheAlloc alloc)
    : file_(file), memory_(alloc, table_size, capacity), entries_(capacity), index_(capacity) {
    free_slots_.reserve(capacity);
    for (size_t slot = capacity; slot-- > 0;) free_slots_.push_back(static_cast<uint32_t>(slot));
}

TableCache::TableResult TableCache::get(uint64_t offset) {
    if (const auto slot = index_.find(offset)) {
        ++counters_.hits;
        unlink(*slot);
        link_newest(*slot);
        entries_[*slot].used = true;
        return Table(this, *slot);
    }
    ++counters_.misses;
    const auto slot = take_slot();
    if (!slot) return Unexpected{slot.error()};
    const std::span<uint8_t> table = memory_.hold(*slot);
    if (table.empty()) {
        free_slots_.push_back(*slot);
        return Unexpected{std::make_error_code(std::errc::not_enough_memory)};
    }
    if (auto read = file_.read(offset, table); !read) {
        memory_.drop(*slot);
        free_slots_.push_back(*slot);
        return Unexpected{read.error()};
    }
    install(*slot, offset);
    return Table(this, *slot);
}

TableCache::TableResult TableCache::get_empty(uint64_t offset) {
    auto slot = index_.find(offset);
    if (!slot) {
        auto taken = take_slot();
        if (!taken) return Unexpected{taken.error()};
        if (memory_.hold(*taken).empty()) {
            free_slots_.push_back(*taken);
            return Unexpected{std::make_error_code(std::errc::not_enough_memory)};
        }
        install(*taken, offset);
        slot = *taken;
    }
    const std::span<uint8_t> table = memory_.table(*slot);
    std::fill(table.begin(), table.end(), 0);
    return Table(this, *slot);
}

void TableCache::forget(uint64_t offset) {
    if (const auto slot = index_.find(offset)) remove(*slot);
}

Result<uint32_t, std::error_code> TableCache::take_slot() {
    if (!free_slots_.empty()) {
        const uint32_t slot = free_slots_.back();
        free_slots_.pop_back();
        return slot;
    }
    uint32_t victim = oldest_;
    while (victim != kNil && entries_[victim].pins != 0) victim = entries_[victim].newer;
    if (victim == kNil)
        return Unexpected{std::make_error_code(std::errc::resource_unavailable_try_again)};
    if (auto written = write_entry(victim); !written) return Unexpected{written.error()};
    ++counters_.evictions;
    remove(victim);
    free_slots_.pop_back();  // remove() freed it; it is ours
    return victim;
}

void TableCache::install(uint32_t slot, uint64_t offset) {
    entries_[slot] = Entry{.offset = offset, .used = true};
    index_.insert(offset, slot);
    link_newest(slot);
}

void TableCache::remove(uint32_t slot) {
    index_.erase(entries_[slot].offset);
    unlink(slot);
    entries_[slot] = Entry{};
    memory_.drop(slot);
    free_slots_.push_back(slot);
}

void TableCache::link_newest(uint32_t slot) {
    entries_[slot].older = newest_;
    entries_[slot].newer = kNil;
    if (newest_ != kNil) entries_[newest_].newer = slot;
    newest_ = slot;
    if (oldest_ == kNil) oldest_ = slot;
}

void TableCache::unlink(uint32_t slot) {
    Entry& e = entries_[slot];
    (e.newer != kNil ? entries_[e.newer].older : newest_) = e.older;
    (e.older != kNil ? entries_[e.older].newer : oldest_) = e.newer;
    e.newer = e.older = kNil;
}

IoResult TableCache::write_entry(uint32_t slot) {
    Entry& entry = entries_[slot];
    if (!entry.dirty) return Ok{};
    if (depends_on_) {
        if (auto flushed = flush_dependency(); !flushed) return flushed;
    }
    if (auto written = file_.write(entry.offset, memory_.table(slot)); !written) return written;
    entry.dirty = false;
    return Ok{};
}

IoResult TableCache::flush_dependency() {
    if (auto flushed = depends_on_->flush(); !flushed) return flushed;
    depends_on_ = nullptr;
    return Ok{};
}

IoResult TableCache::set_dependency(TableCache& dependency) {
    // Never a cycle: what the dependency itself waits for is written first.
    if (dependency.depends_on_) {
        if (auto flushed = dependency.flush_dependency(); !flushed) return flushed;
    }
    if (depends_on_ && depends_on_ != &dependency) {
        if (auto flushed = flush_dependency(); !flushed) return flushed;
    }
    depends_on_ = &dependency;
    return Ok{};
}

IoResult TableCache::write_dirty() {
    for (uint32_t slot = 0; slot < entries_.size(); ++slot) {
        if (entries_[slot].offset == kNoTable) continue;
        if (auto written = write_entry(slot); !written) return written;
    }
    return Ok{};
}

IoResult TableCache::flush() {
    if (auto written = write_dirty(); !written) return written;
    return file_.sync();
}

size_t TableCache::clean_unused() {
    size_t cleaned = 0;
    for (uint32_t slot = 0; slot < entries_.size(); ++slot) {
        Entry& entry = entries_[slot];
        if (entry.offset == kNoTable) continue;
        if (entry.used || entry.dirty || entry.pins != 0) {
            entry.used = false;
            continue;
        }
        remove(slot);
        ++cleaned;
    }
    // Every run of free slots gives its whole pages back.
    for (uint32_t first = 0; first < entries_.size();) {
        uint32_t end = first;
        while (end < entries_.size() && entries_[end].offset == kNoTable) ++end;
        memory_.give_back(first, end - first);
        first = end + 1;
    }
    counters_.cleanings += cleaned;
    return cleaned;
}

CacheStats::Cache TableCache::stats() const {
    CacheStats::Cache stats = counters_;
    stats.capacity = entries_.size();
    stats.entries = entries_.size() - free_slots_.size();
    stats.bytes_allocated = memory_.bytes_allocated();
    stats.bytes_resident = memory_.bytes_resident();
    return stats;
}

}  // namespace mvmm::devices::block::qcow2
