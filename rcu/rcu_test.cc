#include "rcu/rcu.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace mvmm::rcu {
namespace {

using namespace std::chrono_literals;

// Long enough for a broken grace period to let the writer through, short enough for a unit test.
constexpr auto kBlockedFor = 100ms;

// A thread that enters a read-side critical section `depth` times deep and leaves one level per
// leave() call.
class Reader {
  public:
    explicit Reader(int depth)
        : thread_([this, depth] {
              for (int i = 0; i < depth; ++i) read_lock();
              inside_.set_value();
              for (int i = 0; i < depth; ++i) {
                  leave_[i].get_future().wait();
                  read_unlock();
              }
          }) {
        inside_.get_future().wait();
    }

    void leave(int level) { leave_[level].set_value(); }

  private:
    std::promise<void> inside_;
    std::promise<void> leave_[3];
    std::jthread thread_;
};

bool finishes_within(std::future<void>& done, std::chrono::milliseconds limit) {
    return done.wait_for(limit) == std::future_status::ready;
}

TEST(Rcu, SynchronizeWithoutReadersReturns) {
    synchronize();
}

TEST(Rcu, SynchronizeWaitsForOutermostUnlock) {
    Reader reader(3);
    auto done = std::async(std::launch::async, [] { synchronize(); });
    EXPECT_FALSE(finishes_within(done, kBlockedFor));
    reader.leave(0);
    reader.leave(1);
    EXPECT_FALSE(finishes_within(done, kBlockedFor)) << "an inner unlock ended the section";
    reader.leave(2);
    EXPECT_TRUE(finishes_within(done, 10s));
}

TEST(Rcu, SynchronizeIgnoresReadersThatLeftBeforeIt) {
    {
        Reader reader(1);
        reader.leave(0);
    }
    auto done = std::async(std::launch::async, [] { synchronize(); });
    EXPECT_TRUE(finishes_within(done, 10s));
}

TEST(Rcu, NestedGuardsOnOneThread) {
    std::atomic<bool> ran{false};
    std::future<void> drained;  // outlives the guard: its destructor waits for drain()
    {
        ReadGuard outer;
        { ReadGuard inner; }
        call([&] { ran = true; });
        drained = std::async(std::launch::async, [] { drain(); });
        EXPECT_FALSE(finishes_within(drained, kBlockedFor));
        EXPECT_FALSE(ran);
    }
    EXPECT_TRUE(finishes_within(drained, 10s));
    EXPECT_TRUE(ran);
}

TEST(Rcu, CallbacksRunInQueueOrder) {
    std::vector<int> order;  // touched by the call thread only until drain() returns
    constexpr int kCount = 1000;
    for (int i = 0; i < kCount; ++i) call([&order, i] { order.push_back(i); });
    drain();
    ASSERT_EQ(order.size(), size_t{kCount});
    for (int i = 0; i < kCount; ++i) EXPECT_EQ(order[i], i);
}

TEST(Rcu, CallbackWaitsForEarlierReaders) {
    std::atomic<bool> ran{false};
    Reader reader(1);
    call([&] { ran = true; });
    auto drained = std::async(std::launch::async, [] { drain(); });
    EXPECT_FALSE(finishes_within(drained, kBlockedFor));
    EXPECT_FALSE(ran);
    reader.leave(0);
    EXPECT_TRUE(finishes_within(drained, 10s));
    EXPECT_TRUE(ran);
}

TEST(Rcu, DrainWaitsForSlowCallbacksFromEveryThread) {
    std::atomic<int> ran{0};
    call([&] {
        std::this_thread::sleep_for(50ms);
        ++ran;
    });
    std::vector<std::jthread> drainers;
    for (int i = 0; i < 3; ++i) {
        drainers.emplace_back([&] {
            drain();
            EXPECT_EQ(ran, 1);
        });
    }
}

TEST(Rcu, DrainWithNothingQueuedReturns) {
    drain();
    drain();
}

TEST(Rcu, CallbackMayQueueAnother) {
    std::atomic<bool> second{false};
    call([&] { call([&] { second = true; }); });
    drain();  // runs the first, which queues the second after drain's target
    drain();
    EXPECT_TRUE(second);
}

struct Tracked {
    explicit Tracked(std::atomic<int>& destroyed) : destroyed(destroyed) {}
    ~Tracked() { ++destroyed; }
    std::atomic<int>& destroyed;
};

TEST(Rcu, PublishFreesTheOldVersionAfterAGracePeriod) {
    std::atomic<int> destroyed{0};
    Pointer<Tracked> pointer(std::make_unique<Tracked>(destroyed));
    std::atomic<const Tracked*> seen{nullptr};
    auto reader = std::async(std::launch::async, [&] {
        ReadGuard guard;
        seen = pointer.load();
        std::this_thread::sleep_for(kBlockedFor);
        EXPECT_EQ(destroyed, 0) << "freed while a reader held it";
    });
    while (!seen) std::this_thread::yield();
    pointer.publish(std::make_unique<Tracked>(destroyed));
    reader.get();
    drain();
    EXPECT_EQ(destroyed, 1);
}

TEST(Rcu, PointerFreesItsLastVersion) {
    std::atomic<int> destroyed{0};
    { Pointer<Tracked> pointer(std::make_unique<Tracked>(destroyed)); }
    EXPECT_EQ(destroyed, 1);
}

TEST(Rcu, RetireFreesOnTheCallThread) {
    std::atomic<int> destroyed{0};
    retire(std::make_unique<Tracked>(destroyed));
    drain();
    EXPECT_EQ(destroyed, 1);
}

TEST(Rcu, StopRunsWhatIsQueuedAndCallRestarts) {
    std::atomic<int> ran{0};
    call([&] { ++ran; });
    stop();
    EXPECT_EQ(ran, 1);
    stop();  // idempotent
    call([&] { ++ran; });
    drain();
    EXPECT_EQ(ran, 2);
    start();
    start();
}

TEST(Rcu, ExplicitRegistrationEndsEarly) {
    std::jthread thread([] {
        {
            ThreadRegistration registration;
            ReadGuard guard;
        }
        // Unregistered now; a later reader registers again on its own.
        ReadGuard guard;
    });
    thread.join();
    synchronize();
}

TEST(Rcu, ThreadsComeAndGoWhileAWriterWaits) {
    Reader blocker(1);
    auto done = std::async(std::launch::async, [] { synchronize(); });
    for (int i = 0; i < 20; ++i) std::jthread([] { ReadGuard guard; }).join();
    EXPECT_FALSE(finishes_within(done, kBlockedFor));
    blocker.leave(0);
    EXPECT_TRUE(finishes_within(done, 10s));
}

}  // namespace
}  // namespace mvmm::rcu
