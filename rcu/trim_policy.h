// When the call thread gives freed heap memory back to the kernel with malloc_trim().
// Pure decision logic: the caller passes the time in, so tests drive it with a fake clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string_view>

namespace mvmm::rcu {

enum class TrimPolicyKind {
    off,       // never
    batch,     // after every batch of callbacks (QEMU's 2017 v3 patch)
    drain,     // when the queue has drained, before the call thread sleeps (what QEMU merged)
    adaptive,  // like drain and batch, but rate-limited by the measured cost of trimming
};

struct TrimConfig {
    TrimPolicyKind policy = TrimPolicyKind::drain;
    // adaptive: the next trim starts no sooner than factor x cost after the last one ended, so
    // at most 1/(factor+1) of the call thread's time goes to trimming.
    double factor = 100;
    // adaptive: cost = max(last trim's duration, decay x previous cost); one slow trim spaces
    // out the next few, then its weight halves with every trim.
    double decay = 0.5;
    std::size_t pad = std::size_t{4} << 20;  // malloc_trim() leaves this much at the heap top

    // Throws std::invalid_argument naming the bad field.
    void validate() const;
};

// "off", "batch", "drain" or "adaptive"; throws std::invalid_argument listing those otherwise.
TrimPolicyKind parse_trim_policy(std::string_view name);
std::string_view to_string(TrimPolicyKind policy);

enum class TrimEvent {
    batch_done,     // the call thread ran a batch of callbacks
    queue_drained,  // nothing is queued; the call thread is about to sleep
};

class TrimPolicy {
  public:
    using Clock = std::chrono::steady_clock;

    explicit TrimPolicy(const TrimConfig& config);

    bool should_trim(TrimEvent event, Clock::time_point now);
    void record_trim(Clock::time_point finished, Clock::duration took);
    // Set when the rate limit held back a trim that is still due: the idle call thread wakes
    // up then and asks again with queue_drained.
    std::optional<Clock::time_point> retry_at() const;

    const TrimConfig& config() const { return config_; }

  private:
    TrimConfig config_;
    bool freed_since_trim_ = false;  // a batch ran since the last trim
    Clock::duration cost_{};
    Clock::time_point not_before_{};
};

}  // namespace mvmm::rcu
