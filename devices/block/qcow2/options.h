// What an owner chooses when it opens a qcow2 image: its metadata caches.  Names and defaults
// are QEMU's (its qcow2 options on Linux).
#pragma once

#include <chrono>
#include <cstdint>

namespace mvmm::devices::block::qcow2 {

// Where a cache keeps its tables.
enum class CacheAlloc {
    Mapping,  // one anonymous mapping per cache, tables in slots, touched lazily
    Heap,     // one aligned heap allocation per cached table, as QEMU did before its 2015 fix
};

inline constexpr uint64_t kDefaultL2CacheSize = 32 << 20;  // QEMU's DEFAULT_L2_CACHE_MAX_SIZE
inline constexpr uint64_t kMinL2CacheTables = 2;           // a copy-on-write needs two
inline constexpr uint64_t kMinRefcountCacheTables = 4;     // QEMU's default and minimum
inline constexpr std::chrono::seconds kDefaultCacheCleanInterval{600};

struct Qcow2Options {
    // The most bytes of L2 tables to cache (l2-cache-size); the cache never takes more than all
    // of the image's L2 tables, nor fewer than two.
    uint64_t l2_cache_size = kDefaultL2CacheSize;
    // refcount-cache-size; at least four clusters, which is also the default.
    uint64_t refcount_cache_size = 0;
    // cache-clean-interval: tables unused for this long are dropped by clean_idle(); 0: never.
    std::chrono::seconds cache_clean_interval = kDefaultCacheCleanInterval;
    CacheAlloc cache_alloc = CacheAlloc::Mapping;
};

}  // namespace mvmm::devices::block::qcow2
