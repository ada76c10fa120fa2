#include "devices/block/qcow2/table_cache.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <optional>
#include <random>
#include <unordered_map>

#include "devices/block/qcow2/offset_index.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using testing::file_bytes;
using testing::ScratchDir;

constexpr size_t kTable = 4096;
constexpr uint64_t kTables = 16;

// A file of 16 tables, table i filled with the byte i + 1.
class TableCacheTest : public ::testing::TestWithParam<CacheAlloc> {
  protected:
    TableCacheTest() {
        std::vector<uint8_t> contents(kTables * kTable);
        for (size_t i = 0; i < contents.size(); ++i)
            contents[i] = static_cast<uint8_t>(i / kTable + 1);
        file_.emplace(Fd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)), 1, false);
        EXPECT_TRUE(file_->write(0, contents));
    }
    TableCache cache(size_t capacity) { return TableCache(*file_, kTable, capacity, GetParam()); }
    static uint64_t at(uint64_t table) { return table * kTable; }

    ScratchDir dir_;
    std::string path_ = dir_.file("tables");
    std::optional<ImageFile> file_;
};

TEST_P(TableCacheTest, ReadsTablesAndCountsHitsAndMisses) {
    TableCache c = cache(4);
    EXPECT_EQ(c.get(at(3)).value().bytes()[0], 4);
    EXPECT_EQ(c.get(at(3)).value().bytes()[kTable - 1], 4);
    EXPECT_EQ(c.get(at(5)).value().bytes()[0], 6);
    const auto stats = c.stats();
    EXPECT_EQ(stats.misses, 2u);
    EXPECT_EQ(stats.hits, 1u);
    EXPECT_EQ(stats.entries, 2u);
    EXPECT_EQ(stats.capacity, 4u);
}

TEST_P(TableCacheTest, ReplacesTheLeastRecentlyUsedTable) {
    TableCache c = cache(2);
    (void)c.get(at(1)).value();
    (void)c.get(at(2)).value();
    (void)c.get(at(1)).value();  // 2 is now the oldest
    (void)c.get(at(3)).value();
    EXPECT_EQ(c.stats().evictions, 1u);
    const uint64_t misses = c.stats().misses;
    (void)c.get(at(1)).value();
    EXPECT_EQ(c.stats().misses, misses) << "1 stayed";
    (void)c.get(at(2)).value();
    EXPECT_EQ(c.stats().misses, misses + 1) << "2 went";
}

TEST_P(TableCacheTest, APinnedTableStaysAndAFullyPinnedCacheRefuses) {
    TableCache c = cache(2);
    auto a = c.get(at(1));
    {
        auto b = c.get(at(2));
        EXPECT_FALSE(c.get(at(3))) << "both pinned";
    }
    ASSERT_TRUE(c.get(at(3)));
    EXPECT_EQ(a->bytes()[0], 2) << "the pinned table was not replaced";
}

TEST_P(TableCacheTest, WritesDirtyTablesWhenReplacedAndOnFlush) {
    TableCache c = cache(2);
    {
        auto t = c.get(at(1)).value();
        t.bytes()[0] = 0xaa;
        t.mark_dirty();
        auto u = c.get_empty(at(7)).value();
        u.bytes()[1] = 0xbb;
        u.mark_dirty();
    }
    EXPECT_EQ(file_bytes(path_, at(1), 1)[0], 2) << "not yet";
    (void)c.get(at(4)).value();  // replaces table 1
    EXPECT_EQ(file_bytes(path_, at(1), 1)[0], 0xaa);
    ASSERT_TRUE(c.flush());
    EXPECT_EQ(file_bytes(path_, at(7), 2), (std::vector<uint8_t>{0, 0xbb}));
}

TEST_P(TableCacheTest, ADependencyIsWrittenFirst) {
    TableCache l2 = cache(2), refcounts = cache(2);
    auto dirty = [](TableCache& c, uint64_t offset, uint8_t value) {
        auto t = c.get(offset).value();
        t.bytes()[0] = value;
        t.mark_dirty();
    };
    ASSERT_TRUE(l2.set_dependency(refcounts));
    dirty(refcounts, at(9), 0x99);
    dirty(l2, at(1), 0x11);
    ASSERT_TRUE(l2.write_dirty());
    EXPECT_EQ(file_bytes(path_, at(9), 1)[0], 0x99) << "written before the table needing it";

    // The other way round: the refcount block waits for the L2 table.
    dirty(l2, at(2), 0x22);
    ASSERT_TRUE(refcounts.set_dependency(l2));
    dirty(refcounts, at(10), 0xaa);
    ASSERT_TRUE(refcounts.write_dirty());
    EXPECT_EQ(file_bytes(path_, at(2), 1)[0], 0x22);
    EXPECT_EQ(file_bytes(path_, at(10), 1)[0], 0xaa);
}

TEST_P(TableCacheTest, SettingAReverseDependencyWritesTheFirstOne) {
    TableCache l2 = cache(2), refcounts = cache(2);
    ASSERT_TRUE(l2.set_dependency(refcounts));
    {
        auto t = refcounts.get(at(9)).value();
        t.bytes()[0] = 0x77;
        t.mark_dirty();
    }
    ASSERT_TRUE(refcounts.set_dependency(l2));  // no cycle: l2's dependency is written now
    EXPECT_EQ(file_bytes(path_, at(9), 1)[0], 0x77);
}

TEST_P(TableCacheTest, CleaningDropsOnlyTablesIdleForAWholeInterval) {
    TableCache c = cache(8);
    for (uint64_t t = 0; t < 8; ++t) (void)c.get(at(t)).value();
    EXPECT_EQ(c.stats().bytes_resident, 8 * kTable);
    EXPECT_EQ(c.clean_unused(), 0u) << "all used since the start";
    (void)c.get(at(2)).value();
    {
        auto t = c.get(at(3)).value();
        t.mark_dirty();
    }
    ASSERT_TRUE(c.flush());
    EXPECT_EQ(c.clean_unused(), 6u) << "all but the two used";
    const auto stats = c.stats();
    EXPECT_EQ(stats.entries, 2u);
    EXPECT_EQ(stats.cleanings, 6u);
    EXPECT_EQ(stats.bytes_resident, 2 * kTable) << "pages given back";
    EXPECT_EQ(c.clean_unused(), 2u);
    EXPECT_EQ(c.stats().bytes_resident, 0u);
    EXPECT_EQ(c.get(at(2)).value().bytes()[0], 3) << "read again after cleaning";
}

TEST_P(TableCacheTest, ForgetsAFreedTableWithoutWritingIt) {
    TableCache c = cache(2);
    {
        auto t = c.get(at(5)).value();
        t.bytes()[0] = 0x55;
        t.mark_dirty();
    }
    c.forget(at(5));
    ASSERT_TRUE(c.flush());
    EXPECT_EQ(file_bytes(path_, at(5), 1)[0], 6);
    EXPECT_EQ(c.stats().entries, 0u);
}

INSTANTIATE_TEST_SUITE_P(BothAllocs, TableCacheTest,
                         ::testing::Values(CacheAlloc::Mapping, CacheAlloc::Heap),
                         [](const auto& info) {
                             return info.param == CacheAlloc::Mapping ? "Mapping" : "Heap";
                         });

#ifndef MVMM_SANITIZER_RUNTIME
// What the allocator holds now (glibc's heap; sanitizers bring their own).
size_t heap_in_use() {
    return mallinfo2().uordblks;
}

TEST(CacheMemoryTest, HeapAllocatesOneTablePerEntryAndMappingNone) {
    ScratchDir dir;
    const std::string path = dir.file("big");
    const ImageFile file(Fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)), 1, false);
    ASSERT_EQ(::ftruncate(file.fd(), 256 * 65536), 0);
    for (const CacheAlloc alloc : {CacheAlloc::Heap, CacheAlloc::Mapping}) {
        TableCache c(file, 65536, 256, alloc);
        const size_t before = heap_in_use();
        for (uint64_t t = 0; t < 200; ++t) (void)c.get(t * 65536).value();
        const size_t grown = heap_in_use() - before;
        if (alloc == CacheAlloc::Heap) {
            EXPECT_GE(grown, 200u * 65536);
            EXPECT_EQ(c.stats().bytes_allocated, 200u * 65536);
        } else {
            EXPECT_LT(grown, 65536u) << "nothing per table";
            EXPECT_EQ(c.stats().bytes_allocated, 256u * 65536) << "the mapping";
            EXPECT_EQ(c.stats().bytes_resident, 200u * 65536) << "touched lazily";
        }
        for (int i = 0; i < 2; ++i) c.clean_unused();
        EXPECT_EQ(c.stats().bytes_resident, 0u);
        if (alloc == CacheAlloc::Heap) {
            EXPECT_LT(heap_in_use() - before, 65536u) << "freed";
        }
    }
}
#endif

TEST(OffsetIndexTest, KeepsFindingEveryKeyThroughInsertsAndErases) {
    OffsetIndex index(64);
    std::unordered_map<uint64_t, uint32_t> model;
    std::mt19937_64 random(7);
    for (int step = 0; step < 20000; ++step) {
        const uint64_t key = (random() % 200) * 512;
        if (model.contains(key)) {
            index.erase(key);
            model.erase(key);
        } else if (model.size() < 64) {
            const auto slot = static_cast<uint32_t>(random() % 1000);
            index.insert(key, slot);
            model[key] = slot;
        }
        for (uint64_t k = 0; k < 200 * 512; k += 512) {
            const auto found = index.find(k);
            ASSERT_EQ(found.has_value(), model.contains(k)) << "step " << step << " key " << k;
            if (found) {
                ASSERT_EQ(*found, model[k]);
            }
        }
    }
}

}  // namespace
}  // namespace mvmm::devices::block::qcow2
