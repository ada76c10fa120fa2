#include "rcu/trim_policy.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>

namespace mvmm::rcu {
namespace {

using namespace std::chrono_literals;
using Clock = TrimPolicy::Clock;

// A fake clock: tests move `now` by hand.
class TrimPolicyTest : public testing::Test {
  protected:
    TrimPolicy make(TrimPolicyKind kind, double factor = 10) {
        TrimConfig config;
        config.policy = kind;
        config.factor = factor;
        return TrimPolicy(config);
    }
    bool after_batch(TrimPolicy& policy) { return policy.should_trim(TrimEvent::batch_done, now); }
    bool when_drained(TrimPolicy& policy) {
        return policy.should_trim(TrimEvent::queue_drained, now);
    }
    // Trims that take `took`, starting now; the clock moves past the trim.
    void trim(TrimPolicy& policy, Clock::duration took) {
        now += took;
        policy.record_trim(now, took);
    }
    // Trims for `took`, then checks that batches may trim again exactly `gap` after it ended.
    void expect_next_trim_after(TrimPolicy& policy, Clock::duration took, Clock::duration gap) {
        trim(policy, took);
        now += gap - 1ms;
        EXPECT_FALSE(after_batch(policy)) << "too early";
        now += 1ms;
        EXPECT_TRUE(after_batch(policy)) << "still held back";
    }

    Clock::time_point now = Clock::time_point{} + 1h;
};

TEST_F(TrimPolicyTest, OffNeverTrims) {
    TrimPolicy policy = make(TrimPolicyKind::off);
    for (int i = 0; i < 3; ++i) {
        EXPECT_FALSE(after_batch(policy));
        EXPECT_FALSE(when_drained(policy));
        now += 1h;
    }
    EXPECT_FALSE(policy.retry_at());
}

TEST_F(TrimPolicyTest, BatchTrimsAfterEveryBatchOnly) {
    TrimPolicy policy = make(TrimPolicyKind::batch);
    for (int i = 0; i < 3; ++i) {
        EXPECT_TRUE(after_batch(policy));
        trim(policy, 1s);  // however slow
        EXPECT_FALSE(when_drained(policy));
    }
    EXPECT_FALSE(policy.retry_at());
}

TEST_F(TrimPolicyTest, DrainTrimsOnceWhenTheQueueEmpties) {
    TrimPolicy policy = make(TrimPolicyKind::drain);
    EXPECT_FALSE(when_drained(policy)) << "nothing was freed yet";
    EXPECT_FALSE(after_batch(policy));
    EXPECT_FALSE(after_batch(policy));
    EXPECT_TRUE(when_drained(policy));
    trim(policy, 1ms);
    EXPECT_FALSE(when_drained(policy)) << "woken up again with nothing freed since";
    EXPECT_FALSE(after_batch(policy));
    EXPECT_TRUE(when_drained(policy));
    EXPECT_FALSE(policy.retry_at());
}

TEST_F(TrimPolicyTest, AdaptiveWaitsFactorTimesTheLastCost) {
    TrimPolicy policy = make(TrimPolicyKind::adaptive, 10);
    EXPECT_FALSE(when_drained(policy)) << "nothing was freed yet";
    EXPECT_TRUE(after_batch(policy)) << "the first trim is free";
    trim(policy, 2ms);
    const Clock::time_point finished = now;

    now += 19ms;
    EXPECT_FALSE(after_batch(policy));
    EXPECT_FALSE(when_drained(policy));
    EXPECT_EQ(policy.retry_at(), finished + 20ms);
    now = finished + 20ms;
    EXPECT_TRUE(when_drained(policy));
}

TEST_F(TrimPolicyTest, AdaptiveHasNothingToRetryWithoutFrees) {
    TrimPolicy policy = make(TrimPolicyKind::adaptive);
    EXPECT_FALSE(policy.retry_at());
    EXPECT_TRUE(after_batch(policy));
    trim(policy, 1ms);
    EXPECT_FALSE(policy.retry_at());
    now += 1h;
    EXPECT_FALSE(when_drained(policy));
}

TEST_F(TrimPolicyTest, AdaptiveCostDecaysAfterASlowTrim) {
    TrimPolicy policy = make(TrimPolicyKind::adaptive, 10);
    EXPECT_TRUE(after_batch(policy));
    expect_next_trim_after(policy, 8ms, 80ms);  // cost 8 ms
    expect_next_trim_after(policy, 1ms, 40ms);  // cost max(1, 8/2) = 4 ms
    expect_next_trim_after(policy, 1ms, 20ms);  // cost max(1, 4/2) = 2 ms
    expect_next_trim_after(policy, 1ms, 10ms);  // cost max(1, 2/2) = 1 ms
}

TEST_F(TrimPolicyTest, AdaptiveSlowTrimTakesEffectAtOnce) {
    TrimPolicy policy = make(TrimPolicyKind::adaptive, 10);
    EXPECT_TRUE(after_batch(policy));
    expect_next_trim_after(policy, 1ms, 10ms);
    expect_next_trim_after(policy, 50ms, 500ms);
}

TEST(TrimPolicyNames, ParseEveryPolicy) {
    for (auto kind : {TrimPolicyKind::off, TrimPolicyKind::batch, TrimPolicyKind::drain,
                      TrimPolicyKind::adaptive}) {
        EXPECT_EQ(parse_trim_policy(to_string(kind)), kind);
    }
    EXPECT_EQ(parse_trim_policy("adaptive"), TrimPolicyKind::adaptive);
}

TEST(TrimPolicyNames, UnknownNameListsTheChoices) {
    try {
        parse_trim_policy("sometimes");
        FAIL() << "accepted an unknown policy";
    } catch (const std::invalid_argument& error) {
        const std::string message = error.what();
        EXPECT_NE(message.find("'sometimes'"), std::string::npos) << message;
        EXPECT_NE(message.find("off, batch, drain or adaptive"), std::string::npos) << message;
    }
    EXPECT_THROW(parse_trim_policy(""), std::invalid_argument);
    EXPECT_THROW(parse_trim_policy("Drain"), std::invalid_argument);
}

TEST(TrimConfigValidate, RejectsBadFactorsAndDecays) {
    TrimConfig config;
    EXPECT_NO_THROW(config.validate());
    for (double factor : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()}) {
        config.factor = factor;
        EXPECT_THROW(config.validate(), std::invalid_argument) << factor;
        EXPECT_THROW(TrimPolicy{config}, std::invalid_argument) << factor;
    }
    config = {};
    for (double decay : {-0.1, 1.0, std::numeric_limits<double>::quiet_NaN()}) {
        config.decay = decay;
        EXPECT_THROW(config.validate(), std::invalid_argument) << decay;
    }
}

}  // namespace
}  // namespace mvmm::rcu
