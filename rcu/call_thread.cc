// The call thread: batches callbacks, waits one grace period per batch, runs them.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "rcu/rcu.h"

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
        thread_ = std::thread([this] { run(); });
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
            } else {
                wake_.wait(lock, [&] { return !queue_.empty() || stopping_; });
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
        completed_ += count;
        progress_.notify_all();
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

}  // namespace mvmm::rcu
