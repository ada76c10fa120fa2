// rcutorture-style stress: readers check the age of the version they see while a writer
// rotates versions as fast as it can.  MVMM_RCU_TORTURE_MS and MVMM_RCU_TORTURE_READERS
// lengthen and widen the run (the tsan suite does).
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
void read_until(const std::atomic<bool>& stop, Load load, Observations& seen) {
    while (!stop.load(std::memory_order_relaxed)) {
        ReadGuard guard;
        const Version* version = load();
        int age = version->age.load(std::memory_order_acquire);
        bool broken = torn(*version);
        if (seen.reads % 8 == 0) std::this_thread::yield();
        age = std::max(age, version->age.load(std::memory_order_acquire));
        broken = broken || torn(*version);
        ++seen.reads;
        ++seen.by_age[age];
        if (broken) ++seen.torn;
    }
}

// Runs the readers while `write_once` loops for the configured time.
template <class Load, class Write>
Observations torture(Load load, Write write_once) {
    const int reader_count = setting("MVMM_RCU_TORTURE_READERS", 2);
    const auto duration = std::chrono::milliseconds(setting("MVMM_RCU_TORTURE_MS", 300));
    std::atomic<bool> stop{false};
    std::mutex merge_mutex;
    Observations total;
    {
        std::vector<std::jthread> readers;
        for (int i = 0; i < reader_count; ++i) {
            readers.emplace_back([&] {
                Observations seen;
                read_until(stop, load, seen);
                std::lock_guard lock(merge_mutex);
                total.merge(seen);
            });
        }
        const auto deadline = std::chrono::steady_clock::now() + duration;
        while (std::chrono::steady_clock::now() < deadline) write_once();
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
    EXPECT_GT(serial, 10u) << "the writer hardly ran";
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
    EXPECT_GT(serial, 10u) << "the writer hardly ran";
}

}  // namespace
}  // namespace mvmm::rcu
