// What an image's metadata caches hold and did (qcow2's L2 and refcount tables, its backing
// chain's added in); a raw image has none and reports zeroes.
#pragma once

#include <cstdint>

namespace mvmm::devices::block {

struct CacheStats {
    struct Cache {
        uint64_t entries = 0;          // tables cached now
        uint64_t capacity = 0;         // tables it may hold
        uint64_t bytes_resident = 0;   // memory its tables occupy now (mapping: by mincore)
        uint64_t bytes_allocated = 0;  // mapping: its size; heap: the tables allocated now
        uint64_t hits = 0;
        uint64_t misses = 0;
        uint64_t evictions = 0;  // tables replaced by others
        uint64_t cleanings = 0;  // tables dropped for being idle

        Cache& operator+=(const Cache& other) {
            entries += other.entries;
            capacity += other.capacity;
            bytes_resident += other.bytes_resident;
            bytes_allocated += other.bytes_allocated;
            hits += other.hits;
            misses += other.misses;
            evictions += other.evictions;
            cleanings += other.cleanings;
            return *this;
        }
    };
    Cache l2;
    Cache refcount;
};

}  // namespace mvmm::devices::block
