// The call thread: batches callbacks, waits one grace period per batch, runs them, and trims
// the heap as its policy says.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "base/thread_name.h"
#include "rcu/heap_trim.h"
#include "rcu/rcu.h"
#include "rcu/trim.h"

namespace mvmm::rcu {

namespace {

using namespace std::chrono_literals;

// A small batch waits this long for more callbacks, so that one grace period covers many of
// them (QEMU: RCU_CALL_MIN_SIZE, five 10 ms naps).
constexpr size_t kMinBatch = 30;
constexpr auto kBatchDelay = 50ms;

class CallThread {
  public:
    void call(Callback fn) {
        std::lock_guard lock(mutex_);
        queue_.push_back(std::move(fn));
        ++queued_;
        start_locked();
        if (queue_.size() == 1 || queue_.size() == kMinBatch) wake_.notify_one();
    }

    void drain() {
        assert(detail::this_reader.depth == 0);
        std::unique_lock lock(mutex_);
        assert(thread_.get_id() != std::this_thread::get_id());
        const uint64_t target = queued_;
        if (completed_ >= target) return;
        start_locked();
        ++drain_waiters_;
        wake_.notify_one();
        progress_.wait(lock, [&] { return completed_ >= target; });
        --drain_waiters_;
    }

    void start() {
        std::lock_guard lock(mutex_);
        start_locked();
    }

    TrimPolicyChange set_trim_policy(const TrimConfig& config) {
        TrimPolicy policy(config);
        std::lock_guard lock(mutex_);
        policy_ = policy;
        const TrimPolicyChange change{std::chrono::steady_clock::now(), batches_ + 1, config};
        if (changes_.size() == TrimStats::kMaxPolicyChanges) changes_.erase(changes_.begin());
        changes_.push_back(change);
        ++policy_changes_;
        wake_.notify_one();  // an idle thread may be waiting for the old policy's retry time
        return change;
    }

    TrimStats trim_stats() {
        std::lock_guard lock(mutex_);
        return {trim_supported(), policy_.config(), batches_,        completed_,
                by_policy_,       on_demand_,       policy_changes_, changes_};
    }

    std::optional<TrimResult> trim_now() {
        std::unique_lock lock(mutex_);
        const std::size_t pad = policy_.config().pad;
        lock.unlock();
        std::optional<TrimResult> result = trim_heap(pad);
        lock.lock();
        if (result) on_demand_.add(*result);
        return result;
    }

    void stop() {
        std::lock_guard serialize(stop_mutex_);
        std::unique_lock lock(mutex_);
        // exit() from inside a callback: the thread cannot join itself.
        if (!running_ || thread_.get_id() == std::this_thread::get_id()) return;
        stopping_ = true;
        wake_.notify_one();
        lock.unlock();
        thread_.join();  // run() returns only with an empty queue
        lock.lock();
        running_ = false;
        stopping_ = false;
        // Callbacks queued after the thread decided to exit still have to run.
        if (!queue_.empty()) start_locked();
    }

  private:
    void start_locked() {
        if (running_) return;
        thread_ = std::thread([this] {
            name_this_thread("rcu-call");
            run();
        });
        running_ = true;
        if (!stop_at_exit_) {
            std::atexit([] { rcu::stop(); });
            stop_at_exit_ = true;
        }
    }

    void run() {
        std::unique_lock lock(mutex_);
        for (;;) {
            if (!queue_.empty()) {
                run_batch(lock);
            } else if (stopping_) {
                return;
            } else if (!trim_if_due(lock, TrimEvent::queue_drained)) {
                // Spurious wake-ups are harmless: every pass re-checks everything.
                if (auto retry = policy_.retry_at()) {
                    wake_.wait_until(lock, *retry);
                } else {
                    wake_.wait(lock);
                }
            }
        }
    }

    bool hurried() const { return drain_waiters_ > 0 || stopping_; }

    void run_batch(std::unique_lock<std::mutex>& lock) {
        if (queue_.size() < kMinBatch && !hurried()) {
            wake_.wait_for(lock, kBatchDelay,
                           [&] { return queue_.size() >= kMinBatch || hurried(); });
        }
        std::vector<Callback> batch = std::exchange(queue_, {});
        lock.unlock();
        synchronize();
        for (Callback& fn : batch) fn();
        const size_t count = batch.size();
        batch.clear();  // the callables may own memory: free it outside the lock
        lock.lock();
        ++batches_;
        // Trim before reporting progress, so that a drain() sees this batch's trim counted.
        trim_if_due(lock, TrimEvent::batch_done);
        completed_ += count;
        progress_.notify_all();
    }

    // Returns whether it trimmed, with the lock dropped meanwhile.
    bool trim_if_due(std::unique_lock<std::mutex>& lock, TrimEvent event) {
        if (!trim_supported() || !policy_.should_trim(event, TrimPolicy::Clock::now())) {
            return false;
        }
        const std::size_t pad = policy_.config().pad;
        lock.unlock();
        std::optional<TrimResult> result = trim_heap(pad);
        lock.lock();
        policy_.record_trim(TrimPolicy::Clock::now(), result->duration);
        by_policy_.add(*result);
        return true;
    }

    std::mutex mutex_;
    std::condition_variable wake_;      // the call thread sleeps here
    std::condition_variable progress_;  // drain() sleeps here
    std::vector<Callback> queue_;
    uint64_t queued_ = 0;     // callbacks ever queued
    uint64_t completed_ = 0;  // callbacks ever run
    unsigned drain_waiters_ = 0;
    bool running_ = false;
    bool stopping_ = false;
    bool stop_at_exit_ = false;
    std::thread thread_;
    std::mutex stop_mutex_;  // one stop() at a time
    TrimPolicy policy_{TrimConfig{}};
    uint64_t batches_ = 0;
    TrimCounters by_policy_;
    TrimCounters on_demand_;
    uint64_t policy_changes_ = 0;
    std::vector<TrimPolicyChange> changes_;  // the last TrimStats::kMaxPolicyChanges
};

// Never destroyed: the atexit hook and late callers may run after static destructors.
CallThread& call_thread() {
    static CallThread& instance = *new CallThread;
    return instance;
}

}  // namespace

void call(Callback fn) {
    call_thread().call(std::move(fn));
}

void drain() {
    call_thread().drain();
}

void start() {
    call_thread().start();
}

void stop() {
    call_thread().stop();
}

TrimPolicyChange set_trim_policy(const TrimConfig& config) {
    return call_thread().set_trim_policy(config);
}

TrimStats trim_stats() {
    return call_thread().trim_stats();
}

std::optional<TrimResult> trim_now() {
    return call_thread().trim_now();
}

}  // namespace mvmm::rcu
