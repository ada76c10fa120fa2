// rcutorture-style stress: readers check the age of the version they see while a writer
// rotates versions as fast as it can.  MVMM_RCU_TORTURE_MS and MVMM_RCU_TORTURE_READERS
// lengthen and widen the run (the tsan suite does).  The run also lasts until the writer has
// published kMinWrites versions and every reader has read: on a loaded machine the time alone
// may see the writer run a handful of times (seen: 10 in 300 ms under TSan beside a build).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "rcu/rcu.h"

namespace mvmm::rcu {
namespace {

int setting(const char* name, int fallback) {
    const char* value = std::getenv(name);
    return value ? std::atoi(value) : fallback;
}

enum Age : int {
    kCurrent = 0,
    kRetired = 1,  // unpublished, a grace period in progress
    kStale = 2,    // a whole grace period has passed since it was unpublished (or it is freed)
};

struct Version {
    explicit Version(uint64_t serial) : serial(serial) { payload.fill(serial); }
    ~Version() {
        age.store(kStale, std::memory_order_release);
        payload.fill(~serial);
    }
    std::atomic<int> age{kCurrent};
    const uint64_t serial;
    std::array<uint64_t, 8> payload;  // plain memory, so that ASan and TSan watch the accesses
};

struct Observations {
    uint64_t reads = 0;
    std::array<uint64_t, 3> by_age{};
    uint64_t torn = 0;  // payload not all equal to the serial

    void merge(const Observations& other) {
        reads += other.reads;
        for (size_t i = 0; i < by_age.size(); ++i) by_age[i] += other.by_age[i];
        torn += other.torn;
    }
};

std::ostream& operator<<(std::ostream& out, const Observations& seen) {
    return out << seen.reads << " reads; ages seen: current " << seen.by_age[kCurrent]
               << ", retired " << seen.by_age[kRetired] << ", stale " << seen.by_age[kStale]
               << "; torn " << seen.torn;
}

bool torn(const Version& version) {
    return std::ranges::any_of(version.payload,
                               [&](uint64_t word) { return word != version.serial; });
}

// Looks at one version twice within a critical section, yielding in between now and then so
// that the writer gets to run while the reader holds it.
template <class Load>
void read_until(const std::atomic<bool>& stop, Load load, Observations& seen,
                std::atomic<int>& readers_started) {
    while (!stop.load(std::memory_order_relaxed)) {
        ReadGuard guard;
        const Version* version = load();
        int age = version->age.load(std::memory_order_acquire);
        bool broken = torn(*version);
        if (seen.reads % 8 == 0) std::this_thread::yield();
        age = std::max(age, version->age.load(std::memory_order_acquire));
        broken = broken || torn(*version);
        if (++seen.reads == 1) readers_started.fetch_add(1);
        ++seen.by_age[age];
        if (broken) ++seen.torn;
    }
}

constexpr uint64_t kMinWrites = 200;

// Runs the readers while `write_once` loops for the configured time, and at least until it has
// run kMinWrites times and every reader has read.
template <class Load, class Write>
Observations torture(Load load, Write write_once) {
    const int reader_count = setting("MVMM_RCU_TORTURE_READERS", 2);
    const auto duration = std::chrono::milliseconds(setting("MVMM_RCU_TORTURE_MS", 300));
    std::atomic<bool> stop{false};
    std::atomic<int> readers_started{0};
    std::mutex merge_mutex;
    Observations total;
    {
        std::vector<std::jthread> readers;
        for (int i = 0; i < reader_count; ++i) {
            readers.emplace_back([&] {
                Observations seen;
                read_until(stop, load, seen, readers_started);
                std::lock_guard lock(merge_mutex);
                total.merge(seen);
            });
        }
        const auto deadline = std::chrono::steady_clock::now() + duration;
        for (uint64_t writes = 0; writes < kMinWrites || readers_started.load() < reader_count ||
                                  std::chrono::steady_clock::now() < deadline;
             ++writes)
            write_once();
        stop = true;
    }
    std::cout << total << "\n";
    return total;
}

TEST(Torture, NoReaderSeesAVersionAGracePeriodAfterItWasUnpublished) {
    auto live = std::make_unique<Version>(0);
    std::atomic<const Version*> current{live.get()};
    // Stale versions stay readable for a while, so that a broken grace period shows up as a
    // stale age rather than as undefined behaviour.
    std::deque<std::unique_ptr<Version>> quarantine;
    uint64_t serial = 0;
    auto seen = torture([&] { return current.load(std::memory_order_acquire); },
                        [&] {
                            auto next = std::make_unique<Version>(++serial);
                            current.store(next.get(), std::memory_order_release);
                            auto old = std::exchange(live, std::move(next));
                            old->age.store(kRetired, std::memory_order_release);
                            synchronize();
                            old->age.store(kStale, std::memory_order_release);
                            quarantine.push_back(std::move(old));
                            if (quarantine.size() > 64) quarantine.pop_front();
                        });
    EXPECT_EQ(seen.by_age[kStale], 0u);
    EXPECT_EQ(seen.torn, 0u);
    EXPECT_GT(seen.reads, 0u);
    EXPECT_GE(serial, kMinWrites);
}

TEST(Torture, NoReaderSeesAVersionFreedByTheCallThread) {
    Pointer<Version> pointer(std::make_unique<Version>(0));
    uint64_t serial = 0;
    auto seen = torture([&] { return pointer.load(); },
                        [&] {
                            pointer.publish(std::make_unique<Version>(++serial));
                            if (serial % 64 == 0) drain();  // bounds the queue
                        });
    drain();
    EXPECT_EQ(seen.by_age[kStale], 0u);
    EXPECT_EQ(seen.torn, 0u);
    EXPECT_GT(seen.reads, 0u);
    EXPECT_GE(serial, kMinWrites);
}

}  // namespace
}  // namespace mvmm::rcu
