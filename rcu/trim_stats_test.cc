// Trim policies and counters with the real call thread.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "rcu/rcu.h"
#include "rcu/trim.h"

namespace mvmm::rcu {
namespace {

using namespace std::chrono_literals;

#if defined(MVMM_SANITIZER_RUNTIME)
// The sanitizers bring their own allocator; glibc's malloc_trim() has nothing to give back.
constexpr bool kGlibcHeap = false;
#else
constexpr bool kGlibcHeap = true;
#endif

struct Counts {
    uint64_t batches;
    uint64_t callbacks;
    uint64_t trims;
};

Counts counts() {
    TrimStats stats = trim_stats();
    return {stats.batches, stats.callbacks, stats.by_policy.trims};
}

Counts since(const Counts& before) {
    Counts now = counts();
    return {now.batches - before.batches, now.callbacks - before.callbacks,
            now.trims - before.trims};
}

// Each round retires `objects` small allocations and waits for them to be freed.
void free_in_rounds(int rounds, int objects = 100) {
    for (int round = 0; round < rounds; ++round) {
        for (int i = 0; i < objects; ++i) retire(std::make_unique<std::array<char, 256>>());
        drain();
    }
}

void use_policy(TrimPolicyKind kind, double factor = 100) {
    TrimConfig config;
    config.policy = kind;
    config.factor = factor;
    set_trim_policy(config);
}

// Trims the call thread makes after drain() has returned (the drain policy's) show up late.
uint64_t trims_settled_since(const Counts& before, uint64_t at_least) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (since(before).trims < at_least && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(1ms);
    }
    std::this_thread::sleep_for(50ms);  // and no more than that
    return since(before).trims;
}

class TrimStatsTest : public testing::Test {
  protected:
    void TearDown() override { set_trim_policy(TrimConfig{}); }
};

TEST_F(TrimStatsTest, CountsBatchesAndCallbacks) {
    use_policy(TrimPolicyKind::off);
    const Counts before = counts();
    free_in_rounds(3, 50);
    const Counts delta = since(before);
    EXPECT_EQ(delta.callbacks, 150u);
    EXPECT_GE(delta.batches, 3u);
    EXPECT_LE(delta.batches, 150u);
}

TEST_F(TrimStatsTest, OffNeverTrims) {
    use_policy(TrimPolicyKind::off);
    const Counts before = counts();
    free_in_rounds(5);
    EXPECT_EQ(trims_settled_since(before, 0), 0u);
}

TEST_F(TrimStatsTest, BatchTrimsAfterEveryBatch) {
    use_policy(TrimPolicyKind::batch);
    const Counts before = counts();
    free_in_rounds(5);
    const Counts delta = since(before);
    EXPECT_GE(delta.batches, 5u);
    EXPECT_EQ(delta.trims, trim_supported() ? delta.batches : 0);
}

TEST_F(TrimStatsTest, DrainTrimsWhenIdle) {
    use_policy(TrimPolicyKind::drain);
    const Counts before = counts();
    free_in_rounds(3);
    const uint64_t trims = trims_settled_since(before, 1);
    if (!trim_supported()) {
        EXPECT_EQ(trims, 0u);
        return;
    }
    EXPECT_GE(trims, 1u);
    EXPECT_LE(trims, since(before).batches);
}

TEST_F(TrimStatsTest, AdaptiveIsRateLimited) {
    // Any trim costs at least a microsecond, so the next one is at least 1000 s away.
    use_policy(TrimPolicyKind::adaptive, 1e9);
    const Counts before = counts();
    free_in_rounds(5);
    EXPECT_EQ(trims_settled_since(before, 1), trim_supported() ? 1u : 0u);
}

TEST_F(TrimStatsTest, StatsReportTheConfigAndSupport) {
    TrimConfig config;
    config.policy = TrimPolicyKind::adaptive;
    config.factor = 7;
    set_trim_policy(config);
    TrimStats stats = trim_stats();
    EXPECT_EQ(stats.config.policy, TrimPolicyKind::adaptive);
    EXPECT_EQ(stats.config.factor, 7);
    EXPECT_EQ(stats.supported, trim_supported());
}

TEST_F(TrimStatsTest, InvalidConfigIsRejectedAndTheOldOneKept) {
    use_policy(TrimPolicyKind::batch);
    const uint64_t changes = trim_stats().policy_changes;
    TrimConfig bad;
    bad.factor = -1;
    EXPECT_THROW(set_trim_policy(bad), std::invalid_argument);
    EXPECT_EQ(trim_stats().config.policy, TrimPolicyKind::batch);
    EXPECT_EQ(trim_stats().policy_changes, changes);  // not recorded either
}

TEST_F(TrimStatsTest, ChangesAreRecordedWithTheBatchTheyDecideFrom) {
    use_policy(TrimPolicyKind::off);
    free_in_rounds(2);
    const auto before = std::chrono::steady_clock::now();
    const TrimStats stats_before = trim_stats();
    TrimConfig config;
    config.policy = TrimPolicyKind::adaptive;
    config.factor = 3;
    const TrimPolicyChange change = set_trim_policy(config);
    EXPECT_EQ(change.from_batch, stats_before.batches + 1);
    EXPECT_GE(change.at, before);
    const TrimStats stats = trim_stats();
    EXPECT_EQ(stats.policy_changes, stats_before.policy_changes + 1);
    ASSERT_FALSE(stats.recent_changes.empty());
    EXPECT_EQ(stats.recent_changes.back().config.policy, TrimPolicyKind::adaptive);
    EXPECT_EQ(stats.recent_changes.back().config.factor, 3);
    EXPECT_EQ(stats.recent_changes.back().from_batch, change.from_batch);
}

TEST_F(TrimStatsTest, OnlyTheLastChangesAreKept) {
    for (std::size_t i = 0; i < TrimStats::kMaxPolicyChanges + 5; ++i)
        use_policy(TrimPolicyKind::adaptive, double(i + 1));
    const TrimStats stats = trim_stats();
    ASSERT_EQ(stats.recent_changes.size(), TrimStats::kMaxPolicyChanges);
    EXPECT_EQ(stats.recent_changes.back().config.factor, double(TrimStats::kMaxPolicyChanges + 5));
}

TEST_F(TrimStatsTest, TrimNowGivesBackFreedMemory) {
    const TrimCounters before = trim_stats().on_demand;
    // Many small blocks below one that stays: freeing them leaves holes that only trimming
    // returns to the kernel.
    std::vector<std::unique_ptr<char[]>> blocks;
    for (int i = 0; i < 20000; ++i) {
        blocks.push_back(std::make_unique<char[]>(1000));
        std::memset(blocks.back().get(), 1, 1000);
    }
    auto keeper = std::make_unique<char[]>(1000);
    blocks.clear();

    std::optional<TrimResult> result = trim_now();
    const TrimCounters after = trim_stats().on_demand;
    if (!trim_supported()) {
        EXPECT_FALSE(result);
        EXPECT_EQ(after.trims, before.trims);
        return;
    }
    ASSERT_TRUE(result);
    EXPECT_GT(result->duration, 0ns);
    EXPECT_EQ(after.trims, before.trims + 1);
    EXPECT_EQ(after.time, before.time + result->duration);
    EXPECT_EQ(after.rss_bytes_released, before.rss_bytes_released + result->rss_bytes_released);
    if (kGlibcHeap) {
        EXPECT_GT(result->rss_bytes_released, 10u << 20);
    }
}

TEST(MallocTotals, ReadExactlyWhenTheBuildCanTrim) {
    const std::optional<MallocTotals> totals = malloc_totals();
    ASSERT_EQ(totals.has_value(), trim_supported());
#if !defined(MVMM_SANITIZER_RUNTIME)
    // (The sanitizers bring their own allocator and leave glibc's heap empty.)
    if (totals) {
        EXPECT_GT(totals->arena + totals->hblkhd, 0u);
    }
#endif
    EXPECT_STRNE(allocator_name(), "");
}

}  // namespace
}  // namespace mvmm::rcu
