#include "mem/slot_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mvmm {
namespace {

constexpr size_t kKiB = 1024;

std::vector<SlotPool::Slot> take(SlotPool& pool, uint32_t n) {
    std::vector<SlotPool::Slot> slots;
    for (uint32_t i = 0; i < n; ++i) {
        auto slot = pool.acquire();
        if (!slot) throw std::runtime_error("pool exhausted early");
        slots.push_back(std::move(*slot));
    }
    return slots;
}

class SlotPoolSources : public ::testing::TestWithParam<SlotSource> {};

TEST_P(SlotPoolSources, HandsOutCapacitySlotsThenNothingUntilOneIsBack) {
    SlotPool pool(100, 4, GetParam());
    EXPECT_EQ(pool.slot_size(), 128u);  // rounded up to a cache line
    auto slots = take(pool, 4);
    EXPECT_EQ(pool.in_use(), 4u);
    EXPECT_FALSE(pool.acquire());  // back-pressure, not an allocation
    slots.pop_back();
    EXPECT_EQ(pool.in_use(), 3u);
    EXPECT_TRUE(pool.acquire());
}

TEST_P(SlotPoolSources, SlotsAreDisjointAndAligned) {
    SlotPool pool(200, 8, GetParam());
    auto slots = take(pool, 8);
    std::set<const std::byte*> starts;
    for (size_t i = 0; i < slots.size(); ++i) {
        auto bytes = slots[i].bytes();
        EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % 16, 0u);
        std::memset(bytes.data(), int(i), bytes.size());
        starts.insert(bytes.data());
    }
    EXPECT_EQ(starts.size(), 8u);
    for (size_t i = 0; i < slots.size(); ++i) {
        auto bytes = slots[i].bytes();
        EXPECT_TRUE(
            std::all_of(bytes.begin(), bytes.end(), [&](std::byte b) { return b == std::byte(i); }))
            << "slot " << i << " was overwritten by a neighbour";
    }
}

TEST_P(SlotPoolSources, RemembersTheMostSlotsOutAtOnce) {
    SlotPool pool(64, 8, GetParam());
    EXPECT_EQ(pool.peak_in_use(), 0u);
    {
        auto three = take(pool, 3);
        EXPECT_EQ(pool.peak_in_use(), 3u);
    }
    auto two = take(pool, 2);
    EXPECT_EQ(pool.in_use(), 2u);
    EXPECT_EQ(pool.peak_in_use(), 3u) << "a peak stays when slots come back";
    auto more = take(pool, 5);
    EXPECT_EQ(pool.peak_in_use(), 7u);
}

TEST_P(SlotPoolSources, MovedSlotIsReturnedOnce) {
    SlotPool pool(64, 2, GetParam());
    {
        auto a = pool.acquire();
        SlotPool::Slot b = std::move(*a);
        SlotPool::Slot c = std::move(b);
        EXPECT_EQ(pool.in_use(), 1u);
    }
    EXPECT_EQ(pool.in_use(), 0u);
    take(pool, 2);  // both slots are back
}

INSTANTIATE_TEST_SUITE_P(AllSources, SlotPoolSources,
                         ::testing::Values(SlotSource::pool, SlotSource::malloc,
                                           SlotSource::calloc),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(SlotPoolTest, PoolReusesTheLastReleasedSlotWithoutZeroingIt) {
    SlotPool pool(64, 16);
    auto first = pool.acquire();
    std::byte* const where = first->bytes().data();
    first->bytes()[0] = std::byte{0xab};
    first.reset();
    auto again = pool.acquire();
    EXPECT_EQ(again->bytes().data(), where);
    EXPECT_EQ(again->bytes()[0], std::byte{0xab});
}

TEST(SlotPoolTest, CallocSlotsAreZeroed) {
    SlotPool pool(4 * kKiB, 1, SlotSource::calloc);
    for (int round = 0; round < 3; ++round) {
        auto slot = pool.acquire();
        auto bytes = slot->bytes();
        EXPECT_TRUE(
            std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0}; }));
        std::memset(bytes.data(), 0xff, bytes.size());
    }
}

// The cache-as-one-mapping property: an idle pool is address space only; its resident memory
// follows the slots actually used, and reuse does not grow it.
TEST(SlotPoolTest, IdlePoolIsNotResidentAndGrowsWithUse) {
    constexpr size_t kSlot = 64 * kKiB;
    SlotPool pool(kSlot, 1024);  // 64 MiB of address space
    EXPECT_EQ(pool.resident_bytes(), 0u);
    {
        auto slots = take(pool, 4);
        EXPECT_EQ(pool.resident_bytes(), 0u);  // acquiring touches nothing
        for (auto& slot : slots) std::memset(slot.bytes().data(), 1, kSlot);
        EXPECT_EQ(pool.resident_bytes(), 4 * kSlot);
    }
    for (int round = 0; round < 10; ++round) {
        auto slots = take(pool, 4);
        for (auto& slot : slots) std::memset(slot.bytes().data(), 2, kSlot);
    }
    EXPECT_EQ(pool.resident_bytes(), 4 * kSlot);  // the same four slots came back
}

TEST(SlotPoolTest, HeapSourcesHaveNoMapping) {
    SlotPool pool(64 * kKiB, 4, SlotSource::malloc);
    auto slot = pool.acquire();
    std::memset(slot->bytes().data(), 1, slot->bytes().size());
    EXPECT_EQ(pool.resident_bytes(), 0u);
}

TEST(SlotPoolTest, RejectsAnEmptyPool) {
    EXPECT_THROW(SlotPool(0, 4), std::invalid_argument);
    EXPECT_THROW(SlotPool(64, 0), std::invalid_argument);
    EXPECT_THROW(SlotPool(SIZE_MAX / 2, 4), std::invalid_argument);
}

// Threads share a pool smaller than their number: no slot is ever held by two of them, and
// never more than the capacity is out.
TEST(SlotPoolTest, ThreadsNeverShareASlot) {
    constexpr uint32_t kCapacity = 3;
    SlotPool pool(64, kCapacity);
    std::atomic<int> out{0}, most{0}, failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 5000; ++i) {
                auto slot = pool.acquire();
                if (!slot) continue;
                const int now = ++out;
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                std::memset(slot->bytes().data(), t, slot->bytes().size());
                auto bytes = slot->bytes();
                if (!std::all_of(bytes.begin(), bytes.end(),
                                 [&](std::byte b) { return b == std::byte(t); }))
                    ++failures;
                --out;
            }
        });
    }
    for (auto& thread : threads) thread.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_LE(most.load(), int(kCapacity));
    EXPECT_EQ(pool.in_use(), 0u);
}

}  // namespace
}  // namespace mvmm
