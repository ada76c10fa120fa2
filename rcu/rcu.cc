// Grace periods: QEMU-style counter-based RCU (see rcu/README.md).
#include "rcu/rcu.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

namespace mvmm::rcu {

namespace detail {

constinit thread_local Reader this_reader;
// Odd, so that a reader inside a critical section never stores 0; bumped by 2 per grace period.
constinit std::atomic<uint64_t> grace_period{1};
constinit std::atomic<bool> writers_use_membarrier{false};

}  // namespace detail

namespace {

using detail::Reader;

// A one-shot wake-up for the writer waiting in synchronize(): set() by readers, wait() by the
// writer, reset() by the writer before it looks at the readers again.  Sleeps on a futex.
class Event {
  public:
    void reset() noexcept { state_.store(0, std::memory_order_relaxed); }
    void set() noexcept {
        if (state_.exchange(1, std::memory_order_release) == 0) state_.notify_all();
    }
    void wait() noexcept {
        while (state_.load(std::memory_order_acquire) == 0) state_.wait(0);
    }

  private:
    std::atomic<uint32_t> state_{0};
};

struct Registry {
    std::mutex mutex;  // guards readers, Reader::quiescent_in and the membarrier decision
    std::vector<Reader*> readers;
    bool membarrier_decided = false;
    std::mutex synchronize_mutex;  // one writer at a time
    Event reader_left;
};

// Never destroyed: detached threads may unregister after static destructors have run.
Registry& registry() {
    static Registry& instance = *new Registry;
    return instance;
}

long membarrier(int command) {
    return syscall(__NR_membarrier, command, 0);
}

bool membarrier_wanted() {
    const char* setting = std::getenv("MVMM_RCU_MEMBARRIER");
    return setting == nullptr || std::string_view(setting) != "0";
}

// Expedited private membarrier interrupts only the CPUs running our threads; without it (old
// kernel, seccomp, or MVMM_RCU_MEMBARRIER=0) both sides pay for a real fence.
bool enable_membarrier() {
    if (!membarrier_wanted()) return false;
    long commands = membarrier(MEMBARRIER_CMD_QUERY);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

// A full fence on every thread of the process, pairing with reader_fence().
void writer_fence() {
    if (!detail::writers_use_membarrier.load(std::memory_order_relaxed)) {
        detail::full_fence();
    } else if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
        // Readers rely on it for ordering; going on would let them see freed memory.
        std::perror("mvmm rcu: membarrier");
        std::abort();
    }
}

void unregister_this_thread() {
    Reader& reader = detail::this_reader;
    if (!reader.registered) return;
    assert(reader.depth == 0);
    Registry& reg = registry();
    std::lock_guard lock(reg.mutex);
    std::erase(reg.readers, &reader);
    reader.registered = false;
}

struct UnregisterAtThreadExit {
    ~UnregisterAtThreadExit() { unregister_this_thread(); }
};

bool ongoing(const Reader& reader, uint64_t period) {
    uint64_t seen = reader.period.load(std::memory_order_acquire);
    return seen != 0 && seen != period;
}

// Waits until every registered reader has been seen outside a critical section, or inside one
// that started in `period`.  Called with the registry mutex held; drops it while sleeping so
// that threads can come and go.
void wait_for_readers(std::unique_lock<std::mutex>& lock, uint64_t period) {
    Registry& reg = registry();
    for (;;) {
        reg.reader_left.reset();
        for (Reader* reader : reg.readers) {
            if (reader->quiescent_in != period)
                reader->writer_waiting.store(true, std::memory_order_release);
        }
        // Pairs with read_unlock(): order the writer_waiting stores before the period loads.
        writer_fence();
        bool pending = false;
        for (Reader* reader : reg.readers) {
            if (reader->quiescent_in == period) continue;
            if (ongoing(*reader, period)) {
                pending = true;
            } else {
                reader->quiescent_in = period;
                reader->writer_waiting.store(false, std::memory_order_relaxed);
            }
        }
        if (!pending) return;
        lock.unlock();
        reg.reader_left.wait();
        lock.lock();
    }
}

}  // namespace

namespace detail {

void register_this_thread() {
    Reader& reader = this_reader;
    if (reader.registered) return;
    thread_local UnregisterAtThreadExit unregister_at_exit;
    Registry& reg = registry();
    std::lock_guard lock(reg.mutex);
    if (!reg.membarrier_decided) {
        // Before the first reader exists, so no reader ever skips a fence a writer relies on.
        writers_use_membarrier.store(enable_membarrier(), std::memory_order_relaxed);
        reg.membarrier_decided = true;
    }
    reader.quiescent_in = 0;
    reg.readers.push_back(&reader);
    reader.registered = true;
}

void wake_writer(Reader& reader) noexcept {
    reader.writer_waiting.store(false, std::memory_order_relaxed);
    registry().reader_left.set();
}

}  // namespace detail

ThreadRegistration::ThreadRegistration() {
    detail::register_this_thread();
}

ThreadRegistration::~ThreadRegistration() {
    unregister_this_thread();
}

void synchronize() {
    assert(detail::this_reader.depth == 0);
    Registry& reg = registry();
    std::lock_guard serialize(reg.synchronize_mutex);
    std::unique_lock lock(reg.mutex);
    if (reg.readers.empty()) return;
    // Readers that see the new period must also see what the caller unpublished.
    writer_fence();
    uint64_t period = detail::grace_period.load(std::memory_order_relaxed) + 2;
    detail::grace_period.store(period, std::memory_order_relaxed);
    wait_for_readers(lock, period);
}

}  // namespace mvmm::rcu
