// The shared queue worker on a real I/O thread: the test plays the driver over guest memory
// and kicks real eventfds, as KVM's ioeventfds do.
#include "devices/virtio/queue_worker.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio {
namespace {

namespace vt = ::mvmm::devices::virtio::testing;
using namespace std::chrono_literals;

constexpr uint64_t kFeatures = kFeatureVersion1 | kFeatureEventIdx;

// Echoes: writes the first readable byte + 1 into the first writable byte.
class IncrementHandler : public RequestHandler {
  public:
    uint32_t handle(const DescriptorChain& chain) override {
        uint8_t byte = 0;
        chain.readable.copy_to(0, std::span(&byte, 1));
        ++byte;
        return static_cast<uint32_t>(chain.writable.copy_from(0, std::span(&byte, 1)));
    }
};

class ThrowingHandler : public RequestHandler {
  public:
    uint32_t handle(const DescriptorChain&) override { throw std::bad_alloc(); }
};

class QueueWorkersTest : public ::testing::Test {
  protected:
    explicit QueueWorkersTest(uint16_t queues = 2, uint16_t size = 8) {
        for (uint16_t i = 0; i < queues; ++i) {
            drivers.push_back(std::make_unique<vt::TestDriver>(guest, size));
            kicks.emplace_back();
        }
    }

    ActivateContext context() {
        ActivateContext context{guest.memory(), kFeatures, {}, {}, interrupt};
        for (size_t i = 0; i < drivers.size(); ++i) {
            context.queues.push_back(drivers[i]->config());
            context.kicks.push_back(&kicks[i]);
        }
        return context;
    }
    // `handler` serves every queue: only for one that finishes each chain in handle(), since a
    // device gives each queue its own asynchronous handler, whose completions are that queue's.
    bool start(RequestHandler& handler) {
        return workers.start(context(), uint16_t(drivers.size()), 8,
                             [&](uint16_t) { return &handler; });
    }
    // One handler per queue, by index (nullptr: the queue has no worker).
    bool start_each(std::vector<AsyncRequestHandler*> handlers) {
        return workers.start(context(), uint16_t(drivers.size()), 8,
                             [handlers](uint16_t i) { return handlers.at(i); });
    }
    bool start_first_queue(AsyncRequestHandler& handler) { return start_each({&handler, nullptr}); }

    // One byte out, one byte in; returns where the device's byte goes.
    GuestAddr submit(uint8_t value, size_t queue = 0) {
        const GuestAddr out = guest.alloc(1), in = guest.alloc(1);
        guest.write(out, std::span(&value, 1));
        const vt::TestDriver::Buffer chain[] = {{out, 1, false}, {in, 1, true}};
        drivers[queue]->add_chain(chain);
        return in;
    }
    uint8_t byte_at(GuestAddr addr) const { return guest.read(addr, 1)[0]; }

    vt::TestGuest guest;
    boost::asio::io_context io;
    std::vector<std::unique_ptr<vt::TestDriver>> drivers;
    std::deque<EventFd> kicks;
    vt::FakeInterrupt interrupt;
    QueueCounters counters;
    QueueWorkers workers{io, "test-device", counters};
};

TEST_F(QueueWorkersTest, HandsEveryChainToTheHandlerAndNotifies) {
    IncrementHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start(handler));
    const GuestAddr a = submit(1), b = submit(41, 1);
    kicks[0].signal();
    kicks[1].signal();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 1; }));
    ASSERT_TRUE(vt::eventually([&] { return drivers[1]->used_idx() == 1; }));
    EXPECT_EQ(byte_at(a), 2);
    EXPECT_EQ(byte_at(b), 42);
    EXPECT_EQ(drivers[0]->used(0).len, 1u);
    EXPECT_EQ(counters.requests.load(), 2u);
    EXPECT_TRUE(vt::eventually([&] { return interrupt.queue_notifications.load() == 2; }));
}

TEST_F(QueueWorkersTest, RemembersWhenAndOnWhichQueueAChainWasLastReturned) {
    IncrementHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start(handler));
    EXPECT_FALSE(counters.last_used());
    const auto before = std::chrono::steady_clock::now();
    submit(1, 1);
    kicks[1].signal();
    ASSERT_TRUE(vt::eventually([&] { return drivers[1]->used_idx() == 1; }));
    const auto last = counters.last_used();
    ASSERT_TRUE(last);
    EXPECT_EQ(last->queue, 1);
    // Kept in microseconds: within one of the clock.
    EXPECT_GE(last->at, before - std::chrono::microseconds(1));
    EXPECT_LE(last->at, std::chrono::steady_clock::now());
}

TEST_F(QueueWorkersTest, StatisticsShowEachQueuesPoolAndItsPeak) {
    vt::DeferredHandler handler, idle;
    vt::IoThread thread(io);
    EXPECT_TRUE(counters.statistics().queues.empty()) << "no pool before the first activation";
    for (int i = 0; i < 3; ++i) submit(0);  // the drain at activation starts all three
    ASSERT_TRUE(start_each({&handler, &idle}));
    ASSERT_TRUE(handler.wait_held(3));
    handler.release_newest();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 3; }));

    const auto queues = counters.statistics().queues;
    ASSERT_EQ(queues.size(), 2u);
    for (uint16_t i = 0; i < 2; ++i) {
        EXPECT_EQ(queues[i].queue, i);
        EXPECT_EQ(queues[i].request_alloc, SlotSource::pool);
        EXPECT_EQ(queues[i].slots, 8u) << "one per ring entry";
        EXPECT_FALSE(queues[i].heap_allocations) << "nothing counts them in this test";
    }
    EXPECT_EQ(queues[0].peak_slots_in_use, 3u);
    EXPECT_EQ(queues[1].peak_slots_in_use, 0u);
    EXPECT_GE(queues[0].pool_resident_bytes, 4096u) << "the slots it used are in memory";
    EXPECT_EQ(queues[1].pool_resident_bytes, 0u) << "an idle queue's pool is address space";

    workers.stop();
    EXPECT_EQ(counters.statistics().queues.size(), 2u) << "a reset leaves the figures readable";
    drivers[0] = std::make_unique<vt::TestDriver>(guest, 8);  // a driver sets up new rings
    ActivateContext one_queue = context();
    one_queue.queues[1].ready = false;
    ASSERT_TRUE(workers.start(one_queue, 2, 8, [&](uint16_t) { return &handler; }));
    const auto restarted = counters.statistics().queues;
    ASSERT_EQ(restarted.size(), 1u) << "the next activation replaces them";
    EXPECT_EQ(restarted[0].peak_slots_in_use, 0u);
}

// The asynchronous path: a queue's worth in flight at once, returned to the driver in the
// order they complete, with an interrupt per batch of completions.
TEST_F(QueueWorkersTest, KeepsAQueuesWorthInFlightAndReturnsThemAsTheyComplete) {
    vt::DeferredHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start_first_queue(handler));
    std::vector<uint16_t> heads;
    for (int i = 0; i < 8; ++i) {
        const vt::TestDriver::Buffer chain[] = {{guest.alloc(1), 1, true}};
        heads.push_back(drivers[0]->add_chain(chain));
    }
    kicks[0].signal();
    ASSERT_TRUE(handler.wait_held(8)) << "every chain of the ring started before any completed";
    EXPECT_EQ(drivers[0]->used_idx(), 0);
    EXPECT_EQ(counters.statistics().queues[0].peak_slots_in_use, 8u);

    handler.release_newest(3);
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 3; }));
    for (uint16_t i = 0; i < 3; ++i) EXPECT_EQ(drivers[0]->used(i).id, heads[7 - i]);
    EXPECT_TRUE(vt::eventually([&] { return interrupt.queue_notifications.load() >= 1; }));

    // Three slots are free again: a new chain starts while five are still in flight.
    const vt::TestDriver::Buffer more[] = {{guest.alloc(1), 1, true}};
    const uint16_t late = drivers[0]->add_chain(more);
    kicks[0].signal();
    ASSERT_TRUE(handler.wait_held(6));
    handler.release_newest(1);
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 4; }));
    EXPECT_EQ(drivers[0]->used(3).id, late);
    handler.release_newest();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 9; }));
    EXPECT_EQ(counters.requests.load(), 9u);
    EXPECT_FALSE(counters.needs_reset.load());
}

// A reset completes the requests an asynchronous handler still holds before it returns: their
// buffers are the host's until then.  Nothing interrupts the driver for them.
TEST_F(QueueWorkersTest, StopCompletesTheRequestsInFlightOfAnAsynchronousHandler) {
    vt::DeferredHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start_first_queue(handler));
    const GuestAddr first = submit(0), second = submit(0);
    kicks[0].signal();
    ASSERT_TRUE(handler.wait_held(2));
    const int notifications = interrupt.queue_notifications.load();

    auto stopped = std::async(std::launch::async, [&] { workers.stop(); });
    EXPECT_EQ(stopped.wait_for(50ms), std::future_status::timeout)
        << "stop() returned while requests were in flight";
    handler.release_newest();
    stopped.get();
    EXPECT_EQ(byte_at(first), vt::DeferredHandler::done_byte);
    EXPECT_EQ(byte_at(second), vt::DeferredHandler::done_byte);
    EXPECT_EQ(drivers[0]->used_idx(), 2) << "completed into the used ring";
    EXPECT_EQ(interrupt.queue_notifications.load(), notifications);
    EXPECT_EQ(handler.held(), 0u);
}

// A handler without a completion fd that completes one request per progress(), as one that
// finishes a step at a time would: a reset calls progress() again while it completes some,
// and stops only on one that completes none (a handler bug).
class OneAtATimeHandler : public AsyncRequestHandler {
  public:
    void start(InFlight& request) override { held_.push_back(&request); }
    void progress() override {
        if (held_.empty()) return;
        InFlight* oldest = held_.front();
        held_.pop_front();
        oldest->complete(0);
    }
    size_t held() const { return held_.size(); }

  private:
    std::deque<InFlight*> held_;
};

TEST_F(QueueWorkersTest, StopKeepsCallingAHandlerWithoutAnFdWhileItCompletesSome) {
    OneAtATimeHandler handler;  // queue 0's alone: it completes whatever it holds
    ASSERT_TRUE(start_first_queue(handler));
    for (int i = 0; i < 3; ++i) submit(0);
    io.poll();  // one batch: three started, one completed
    ASSERT_EQ(handler.held(), 2u);
    workers.stop();
    EXPECT_EQ(handler.held(), 0u);
    EXPECT_EQ(drivers[0]->used_idx(), 3);
}

// A completion reaches the driver before the next batch starts: starting it may run it at once
// on the host (io_uring reads from the page cache), which must not hold the interrupt back.
class NotificationsAtStart : public vt::DeferredHandler {
  public:
    explicit NotificationsAtStart(const vt::FakeInterrupt& interrupt) : interrupt_(interrupt) {}
    void start(InFlight& request) override {
        seen.push_back(interrupt_.queue_notifications.load());
        DeferredHandler::start(request);
    }
    std::vector<int> seen;  // the driver's notifications when each request started

  private:
    const vt::FakeInterrupt& interrupt_;
};

TEST_F(QueueWorkersTest, TheDriverHearsOfACompletionBeforeTheNextBatchStarts) {
    NotificationsAtStart handler(interrupt);
    ASSERT_TRUE(start_first_queue(handler));
    submit(0);
    io.poll();  // the first request starts and is held
    ASSERT_EQ(handler.held(), 1u);
    const int before = interrupt.queue_notifications.load();
    submit(0);                 // in the ring, not kicked
    handler.release_newest();  // its eventfd wakes the worker
    vt::IoThread thread(io);
    ASSERT_TRUE(handler.wait_held(1) && handler.seen.size() == 2);
    EXPECT_EQ(handler.seen[1], before + 1)
        << "the first one's interrupt came before the second started";
    handler.release_newest();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 2; }));
}

// Completes each request as it starts, noting the driver's notifications at that moment.
class NotingHandler : public RequestHandler {
  public:
    explicit NotingHandler(const vt::FakeInterrupt& interrupt) : interrupt_(interrupt) {}
    uint32_t handle(const DescriptorChain&) override {
        seen.push_back(interrupt_.queue_notifications.load());
        return 0;
    }
    std::vector<int> seen;  // the driver's notifications when each request started

  private:
    const vt::FakeInterrupt& interrupt_;
};

class QueueWorkersLongRingTest : public QueueWorkersTest {
  protected:
    QueueWorkersLongRingTest() : QueueWorkersTest(1, 32) {}
};

TEST_F(QueueWorkersLongRingTest, TheDriverHearsOfTheFirstCompletionsBeforeTheRestStart) {
    for (int i = 0; i < 32; ++i) submit(0);  // a guest at depth 32, before the worker looks
    NotingHandler handler(interrupt);
    ASSERT_TRUE(workers.start(context(), 1, 32, [&](uint16_t) { return &handler; }));
    vt::IoThread thread(io);
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 32; }));
    ASSERT_EQ(handler.seen.size(), 32u);
    EXPECT_EQ(handler.seen[7], handler.seen[0]) << "the first round ends before its eighth request";
    EXPECT_GT(handler.seen[8], handler.seen[0])
        << "the driver heard of none of the first completions before the ninth request started";
}

TEST_F(QueueWorkersTest, StatisticsKeepTheFirstDriverOkAndTheFirstNotify) {
    IncrementHandler handler;
    vt::IoThread thread(io);
    EXPECT_FALSE(counters.statistics().driver_ok);
    submit(1, 1);  // before DRIVER_OK: the drain at activation serves it, with no notify
    const auto before = std::chrono::steady_clock::now();
    ASSERT_TRUE(start(handler));
    const auto driver_ok = counters.statistics().driver_ok;
    ASSERT_TRUE(driver_ok);
    EXPECT_GE(*driver_ok, before);
    EXPECT_LE(*driver_ok, std::chrono::steady_clock::now());

    ASSERT_TRUE(vt::eventually([&] { return drivers[1]->used_idx() == 1; }));
    EXPECT_FALSE(counters.statistics().first_notify);
    submit(1, 1);
    kicks[1].signal();
    ASSERT_TRUE(vt::eventually([&] { return drivers[1]->used_idx() == 2; }));
    const auto first_notify = counters.statistics().first_notify;
    ASSERT_TRUE(first_notify);
    EXPECT_GE(*first_notify, *driver_ok);

    ASSERT_TRUE(start(handler));  // a reset and a second DRIVER_OK
    EXPECT_EQ(counters.statistics().driver_ok, driver_ok) << "the first is kept";
    EXPECT_EQ(counters.statistics().first_notify, first_notify);
}

// Handlers that "allocate" by bumping a per-thread count, which the statistics take from the
// installed counter as they would from a malloc hook.
thread_local uint64_t fake_allocations = 0;
class AllocatingHandler : public IncrementHandler {
  public:
    uint32_t handle(const DescriptorChain& chain) override {
        fake_allocations += 2;
        return IncrementHandler::handle(chain);
    }
};

struct FakeAllocationCounter {
    FakeAllocationCounter() {
        count_heap_allocations_with([]() noexcept { return fake_allocations; });
    }
    ~FakeAllocationCounter() { count_heap_allocations_with(nullptr); }
};

TEST_F(QueueWorkersTest, StatisticsCountTheHeapAllocationsOfEachQueuesWork) {
    const FakeAllocationCounter installed;
    AllocatingHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start(handler));
    for (int i = 0; i < 3; ++i) submit(0, 1);
    kicks[1].signal();
    ASSERT_TRUE(vt::eventually([&] { return drivers[1]->used_idx() == 3; }));
    const auto queues = counters.statistics().queues;
    ASSERT_EQ(queues.size(), 2u);
    EXPECT_EQ(queues[0].heap_allocations, 0u);
    EXPECT_EQ(queues[1].heap_allocations, 6u);
}

// A request one I/O thread started and another completes is counted before the driver sees it
// done: the serve that started it counts its allocations before it lets the queue go.  The
// gate holds that count on the starting thread while the other thread could complete it.
class CountGate {
  public:
    // Installed as the counter: blocks a thread that has allocated until the gate opens.
    static uint64_t allocations() noexcept {
        std::unique_lock lock(mutex_);
        if (!open_ && fake_allocations > 0) {
            holding_ = true;
            changed_.notify_all();
            changed_.wait(lock, [] { return open_; });
        }
        return fake_allocations;
    }
    CountGate() {
        {
            std::lock_guard lock(mutex_);
            open_ = holding_ = false;  // a closed gate for each test (--gtest_repeat)
        }
        count_heap_allocations_with(&CountGate::allocations);
    }
    ~CountGate() {
        open();
        count_heap_allocations_with(nullptr);
    }
    bool wait_holding() {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, 5s, [] { return holding_; });
    }
    void open() {
        std::lock_guard lock(mutex_);
        open_ = true;
        changed_.notify_all();
    }

  private:
    static inline std::mutex mutex_;
    static inline std::condition_variable changed_;
    static inline bool open_ = false, holding_ = false;
};

class AllocatingDeferredHandler : public vt::DeferredHandler {
  public:
    void start(InFlight& request) override {
        ++fake_allocations;
        DeferredHandler::start(request);
    }
};

TEST_F(QueueWorkersTest, ARequestCompletedOnAnotherIoThreadIsCountedBeforeTheDriverSeesIt) {
    AllocatingDeferredHandler handler;
    vt::IoThread starting(io), completing(io);
    CountGate gate;  // opens before the I/O threads join
    ASSERT_TRUE(start_first_queue(handler));
    submit(0);
    kicks[0].signal();
    ASSERT_TRUE(gate.wait_holding()) << "the serve that started the request never counted";
    handler.release_newest();  // the other I/O thread wakes to complete it
    for (const auto until = std::chrono::steady_clock::now() + 100ms;
         std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(1ms)) {
        const bool done = drivers[0]->used_idx() == 1;
        const auto counted = counters.statistics().queues.at(0).heap_allocations;
        if (done) {
            ASSERT_EQ(counted, 1u) << "the driver saw it done before it was counted";
        }
    }
    gate.open();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 1; }));
    EXPECT_EQ(counters.statistics().queues.at(0).heap_allocations, 1u);
}

// Every request-alloc mode serves the same chains; only where the request lives differs.
class QueueWorkersAllocTest : public QueueWorkersTest,
                              public ::testing::WithParamInterface<SlotSource> {};

TEST_P(QueueWorkersAllocTest, ServesAFullRingAsOneBatchThenResumes) {
    QueueWorkers workers{io, "test-device", counters, GetParam()};
    IncrementHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(workers.start(context(), 2, 8, [&](uint16_t) { return &handler; }));
    for (int wave = 0; wave < 3; ++wave) {
        // Eight one-descriptor chains fill the ring and every slot of the queue's pool.
        std::vector<GuestAddr> bytes;
        for (int i = 0; i < 8; ++i) {
            bytes.push_back(guest.alloc(1));
            const vt::TestDriver::Buffer chain[] = {{bytes.back(), 1, true}};
            drivers[0]->add_chain(chain);
        }
        kicks[0].signal();
        ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 8 * (wave + 1); }))
            << "wave " << wave;
        for (GuestAddr at : bytes) EXPECT_EQ(byte_at(at), 1);
    }
    // The longest chain a queue of 8 holds: every part fits the slot.
    std::vector<vt::TestDriver::Buffer> longest;
    for (int i = 0; i < 7; ++i) longest.push_back({guest.alloc(1), 1, false});
    const GuestAddr in = guest.alloc(1);
    longest.push_back({in, 1, true});
    guest.write(longest[0].addr, std::vector<uint8_t>{41});
    drivers[0]->add_chain(longest);
    kicks[0].signal();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 25; }));
    EXPECT_EQ(byte_at(in), 42);
    EXPECT_EQ(counters.requests.load(), 25u);
    EXPECT_FALSE(counters.needs_reset.load());
}

INSTANTIATE_TEST_SUITE_P(AllModes, QueueWorkersAllocTest,
                         ::testing::Values(SlotSource::pool, SlotSource::malloc,
                                           SlotSource::calloc),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST_F(QueueWorkersTest, LeavesQueuesWithoutAHandlerAlone) {
    IncrementHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(workers.start(context(), 2, 8, [&](uint16_t i) -> RequestHandler* {
        return i == 0 ? &handler : nullptr;
    }));
    submit(1, 1);
    submit(2, 0);
    kicks[1].signal();
    kicks[0].signal();
    ASSERT_TRUE(vt::eventually([&] { return drivers[0]->used_idx() == 1; }));
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(drivers[1]->used_idx(), 0) << "the buffer stays with the device";
}

// Issue 14's rule: a reset waits for the requests in flight, and after it returns nothing
// reaches the used ring or the interrupt, whatever the driver does.
TEST_F(QueueWorkersTest, StopWaitsForTheRequestInFlightAndNothingCompletesAfterIt) {
    vt::GatedHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start(handler));
    const GuestAddr in_flight = submit(0);
    kicks[0].signal();
    ASSERT_TRUE(handler.wait_entered(1));
    submit(0);  // queued behind the one in flight

    auto stopped = std::async(std::launch::async, [&] { workers.stop(); });
    EXPECT_EQ(stopped.wait_for(50ms), std::future_status::timeout)
        << "stop() returned while a request was in flight";
    handler.release();
    stopped.get();

    EXPECT_EQ(byte_at(in_flight), vt::GatedHandler::done_byte);
    const uint16_t used = drivers[0]->used_idx();
    const int notifications = interrupt.queue_notifications.load();
    EXPECT_GE(used, 1) << "the request in flight completes before stop() returns";
    EXPECT_EQ(used, handler.completed()) << "whatever completed is in the used ring";
    submit(0);
    kicks[0].signal();
    kicks[1].signal();
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(drivers[0]->used_idx(), used);
    EXPECT_EQ(interrupt.queue_notifications.load(), notifications);
    EXPECT_EQ(interrupt.config_notifications.load(), 0);
    EXPECT_EQ(handler.completed(), used);
    EXPECT_FALSE(counters.needs_reset.load());
}

TEST_F(QueueWorkersTest, AHandlerThatThrowsStopsTheQueueWithNeedsReset) {
    ThrowingHandler handler;
    vt::IoThread thread(io);
    ASSERT_TRUE(start(handler));
    submit(0);
    kicks[0].signal();
    ASSERT_TRUE(vt::eventually([&] { return counters.needs_reset.load(); }));
    EXPECT_EQ(counters.failed_queues.load(), 1u);
    EXPECT_TRUE(vt::eventually([&] { return interrupt.config_notifications.load() == 1; }));
    EXPECT_EQ(drivers[0]->used_idx(), 0);
}

TEST_F(QueueWorkersTest, RefusesAContextItCannotServe) {
    IncrementHandler handler;
    auto any = [&](uint16_t) { return &handler; };
    EXPECT_FALSE(workers.start(context(), 3, 8, any)) << "fewer queues than the device has";
    ActivateContext no_kick = context();
    no_kick.kicks[1] = nullptr;
    EXPECT_FALSE(workers.start(no_kick, 2, 8, any));
    EXPECT_FALSE(workers.start(context(), 2, 4, any)) << "a queue larger than the maximum";
    ActivateContext unready = context();
    unready.queues[1].ready = false;
    unready.kicks[1] = nullptr;
    EXPECT_TRUE(workers.start(unready, 2, 8, any)) << "an unused queue needs no kick";
}

}  // namespace
}  // namespace mvmm::devices::virtio
