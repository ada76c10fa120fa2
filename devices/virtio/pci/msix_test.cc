// MSI-X of a virtio-blk function while its queues run, without a vCPU: the test plays a guest
// CPU that masks, unmasks and rewrites the vectors through the same MMIO and ECAM dispatch a vCPU
// exit takes, while the disk's I/O threads complete requests and raise interrupts on the same
// vectors.  Every delivery is checked on the thread that makes it.  Run under ThreadSanitizer
// as well (meson setup -Db_sanitize=thread).
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "devices/pci/test_harness.h"
#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/blk/test_disk.h"
#include "devices/virtio/pci/test_pci_driver.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::pci {
namespace {

using namespace std::chrono_literals;
using devices::testing::PciAddr;

constexpr uint64_t kBar = 0xc000'0000;
constexpr uint64_t kTable = kBar + VirtioPciFunction::kMsixTableOffset;
constexpr uint64_t kPba = kTable + 0x1000;  // the table takes one page
constexpr uint16_t kEnable = 0x8000;
constexpr uint16_t kFunctionMask = 0x4000;
constexpr uint16_t kQueues = 2;  // queue q raises vector q + 1; vector 0 is the config vector
constexpr uint16_t kVectors = kQueues + 1;
constexpr uint16_t kInFlight = 8;  // requests per queue
constexpr uint32_t kBlkIn = 0;

MsiMessage message_for(uint16_t vector, unsigned generation) {
    return {0xfee0'0000 + ((generation % 2) << 12), 0x40 + vector + 0x10 * (generation % 4)};
}

// What the guest has programmed, and so what a delivery may look like.  Changes that allow a
// delivery are recorded before the MMIO write that makes them, changes that forbid one after
// it, so a delivery the model forbids is a real violation, never a race of the test's own.
class GuestView {
  public:
    bool may_fire(uint16_t v) const {
        std::lock_guard lock(mutex_);
        return enabled_ && !function_masked_ && !masked_[v];
    }
    MsiMessage message(uint16_t v) const {
        std::lock_guard lock(mutex_);
        return messages_[v];
    }
    void set_enabled(bool on) {
        locked([&] { enabled_ = on; });
    }
    void set_function_masked(bool on) {
        locked([&] { function_masked_ = on; });
    }
    void set_masked(uint16_t v, bool on) {
        locked([&] { masked_[v] = on; });
    }
    void set_message(uint16_t v, MsiMessage m) {
        locked([&] { messages_[v] = m; });
    }

  private:
    template <class F>
    void locked(F f) {
        std::lock_guard lock(mutex_);
        f();
    }
    mutable std::mutex mutex_;
    bool enabled_ = false;
    bool function_masked_ = false;
    std::array<bool, kVectors> masked_{true, true, true};
    std::array<MsiMessage, kVectors> messages_{};
};

class MsixUnderLoadTest : public ::testing::Test {
  protected:
    MsixUnderLoadTest() {
        blk::DiskConfig config = blk::testing::disk_config(image);
        config.queues = kQueues;
        function = std::make_shared<VirtioPciFunction>(std::make_unique<blk::BlkDevice>(config, io),
                                                       h.platform, guest.memory());
        dev = {0, h.bridge.attach(function, devices::pci::RootBusSlot{}).device, 0};
        driver = std::make_unique<testing::PciDriver>(h, dev);
        driver->assign_bar(kBar);
        msix_control = driver->capabilities().at({0x11, 0}) + 2;
        for (auto& v : h.platform.vectors)
            v->on_trigger = [this](const auto& vector) { check_delivery(vector); };
        for (uint16_t q = 0; q < kQueues; ++q) {
            rings.push_back(std::make_unique<virtio::testing::TestDriver>(guest, 64));
            for (uint16_t slot = 0; slot < kInFlight; ++slot) requests[q][slot] = new_request();
        }
    }
    ~MsixUnderLoadTest() override { stop_io_threads(); }

    // Linux's order: MSI-X on with every vector masked, messages written, vectors unmasked,
    // then the virtio initialization with queue q on vector q + 1.
    void initialize() {
        set_control(kEnable);
        for (uint16_t v = 0; v < kVectors; ++v) program(v, message_for(v, 0));
        for (uint16_t v = 0; v < kVectors; ++v) set_masked(v, false);
        driver->negotiate(kFeatureVersion1);
        driver->set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
        for (uint16_t q = 0; q < kQueues; ++q) driver->setup_queue(q, rings[q]->config(), q + 1);
        driver->set_status(testing::PciDriver::kDriverOkStatus);
        ASSERT_EQ(driver->status(), testing::PciDriver::kDriverOkStatus);
    }

    void start_io_threads(unsigned count) {
        for (unsigned i = 0; i < count; ++i) io_threads.emplace_back([this] { io.run(); });
    }
    void stop_io_threads() {
        work.reset();
        io.stop();
        io_threads.clear();
    }

    // The guest CPU's accesses.
    void set_control(uint16_t control) {
        const bool enabled = control & kEnable;
        const bool masked = control & kFunctionMask;
        if (enabled) view.set_enabled(true);
        if (!masked) view.set_function_masked(false);
        h.ecam_write<uint16_t>(dev, msix_control, control);
        if (!enabled) view.set_enabled(false);
        if (masked) view.set_function_masked(true);
    }
    void set_masked(uint16_t v, bool masked) {
        if (!masked) view.set_masked(v, false);
        h.mmio_write<uint32_t>(kTable + 16 * v + 12, masked ? 1 : 0);
        if (masked) view.set_masked(v, true);
    }
    // Writes a masked vector's message a dword at a time, as Linux does.
    void program(uint16_t v, MsiMessage m) {
        h.mmio_write<uint32_t>(kTable + 16 * v, static_cast<uint32_t>(m.address));
        h.mmio_write<uint32_t>(kTable + 16 * v + 4, static_cast<uint32_t>(m.address >> 32));
        h.mmio_write<uint32_t>(kTable + 16 * v + 8, m.data);
        view.set_message(v, m);
    }
    bool pending(uint16_t v) { return h.mmio_read<uint64_t>(kPba) >> v & 1; }
    unsigned triggers(uint16_t v) { return h.platform.vectors.at(v)->triggers.load(); }

    // Runs on the delivering thread (an I/O thread, or the guest CPU's own on unmask).
    void check_delivery(const devices::testing::FakePlatform::Vector& vector) {
        const auto v = static_cast<uint16_t>(vector.index);
        if (!view.may_fire(v)) ++spurious;
        if (vector.message != view.message(v)) ++misrouted;
        if (v >= 1) seen_used[v - 1].store(rings[v - 1]->used_idx());
    }

    // The driver side of the queues: keeps kInFlight reads in flight on each queue.  Returns
    // false if a queue made no progress for 10 s.
    struct Request {
        GuestAddr header, data, status;
    };
    Request new_request() {
        Request r{guest.alloc(16), guest.alloc(512), guest.alloc(1)};
        const uint32_t header[4] = {kBlkIn, 0, 0, 0};  // type, reserved, sector 0
        guest.write(r.header, std::span(reinterpret_cast<const uint8_t*>(header), 16));
        return r;
    }
    void submit(uint16_t q) {
        const Request& r = requests[q][submitted[q] % kInFlight];
        const virtio::testing::TestDriver::Buffer chain[] = {
            {r.header, 16, false}, {r.data, 512, true}, {r.status, 1, true}};
        rings[q]->add_chain(chain);
        ++submitted[q];
        driver->kick(q);
    }
    bool keep_queues_busy(const std::atomic<bool>& stop) {
        for (uint16_t q = 0; q < kQueues; ++q)
            while (submitted[q] < kInFlight) submit(q);
        auto progress = std::chrono::steady_clock::now();
        while (!stop.load()) {
            bool moved = false;
            for (uint16_t q = 0; q < kQueues; ++q) {
                while (uint16_t(submitted[q] - rings[q]->used_idx()) < kInFlight) {
                    submit(q);
                    moved = true;
                }
            }
            if (moved) progress = std::chrono::steady_clock::now();
            if (std::chrono::steady_clock::now() - progress > 10s) return false;
            std::this_thread::yield();
        }
        return true;
    }

    template <class Done>
    static bool wait_for(Done done) {
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!done()) {
            if (std::chrono::steady_clock::now() > deadline) return false;
            std::this_thread::sleep_for(100us);
        }
        return true;
    }

    blk::testing::TempImage image{1 << 20};
    boost::asio::io_context io;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{
        io.get_executor()};
    devices::testing::PciHarness h;
    virtio::testing::TestGuest guest{4 << 20};
    std::shared_ptr<VirtioPciFunction> function;
    PciAddr dev;
    std::unique_ptr<testing::PciDriver> driver;
    uint16_t msix_control = 0;
    std::vector<std::unique_ptr<virtio::testing::TestDriver>> rings;
    std::array<std::array<Request, kInFlight>, kQueues> requests;
    std::array<uint16_t, kQueues> submitted{};
    GuestView view;
    std::atomic<unsigned> spurious{0};
    std::atomic<unsigned> misrouted{0};
    std::array<std::atomic<uint16_t>, kQueues> seen_used{};  // used idx at the last delivery
    std::vector<std::jthread> io_threads;
};

// (b) An interrupt raised while its vector is masked sets the vector's PBA bit and is
// delivered exactly once when the vector is unmasked, to the message programmed by then.
TEST_F(MsixUnderLoadTest, MaskedVectorIsPendingAndDeliveredOnceOnUnmask) {
    start_io_threads(1);
    ASSERT_NO_FATAL_FAILURE(initialize());
    set_masked(1, true);
    program(1, message_for(1, 1));
    const unsigned before = triggers(1);
    submit(0);
    ASSERT_TRUE(wait_for([&] { return pending(1); }));
    EXPECT_EQ(rings[0]->used_idx(), 1);
    EXPECT_EQ(triggers(1), before);
    set_masked(1, false);
    EXPECT_EQ(triggers(1), before + 1);
    EXPECT_FALSE(pending(1));
    EXPECT_EQ(*h.platform.vectors[1]->message, message_for(1, 1));
    set_masked(1, true);
    set_masked(1, false);
    EXPECT_EQ(triggers(1), before + 1);  // once, not again
    EXPECT_EQ(spurious.load(), 0u);
    EXPECT_EQ(misrouted.load(), 0u);
}

TEST_F(MsixUnderLoadTest, FunctionMaskedInterruptIsPendingAndDeliveredOnceOnUnmask) {
    start_io_threads(1);
    ASSERT_NO_FATAL_FAILURE(initialize());
    set_control(kEnable | kFunctionMask);
    const unsigned before = triggers(2);
    submit(1);
    ASSERT_TRUE(wait_for([&] { return pending(2); }));
    EXPECT_EQ(triggers(2), before);
    EXPECT_FALSE(pending(1));
    set_control(kEnable);
    EXPECT_EQ(triggers(2), before + 1);
    EXPECT_FALSE(pending(2));
    set_control(kEnable | kFunctionMask);
    set_control(kEnable);
    EXPECT_EQ(triggers(2), before + 1);
    EXPECT_EQ(spurious.load(), 0u);
    EXPECT_EQ(misrouted.load(), 0u);
}

// (a) One thread masks, reprograms and unmasks the queue vectors, toggles the function mask
// and MSI-X Enable, while two I/O threads complete requests on both queues.  No delivery while
// the guest forbids one, none to a stale message, every masked-time interrupt pending and
// delivered at unmask, and the last completion of each queue covered by a delivery.
TEST_F(MsixUnderLoadTest, VectorRewritesRaceCompletionsWithoutBreakingDelivery) {
    start_io_threads(2);
    ASSERT_NO_FATAL_FAILURE(initialize());
    std::atomic<bool> stop{false};
    std::atomic<bool> lost_pending{false};
    std::jthread cpu([&] {
        for (unsigned round = 1; round <= 1000 && !lost_pending; ++round) {
            const auto v = static_cast<uint16_t>(1 + round % kQueues);
            const bool function_mask = round % 3 == 0;
            if (function_mask) {
                set_control(kEnable | kFunctionMask);
            } else {
                set_masked(v, true);
                program(v, message_for(v, round));
            }
            // An interrupt raised in the window must be remembered...
            if (!wait_for([&] { return pending(v); })) lost_pending = true;
            const unsigned before = triggers(v);
            function_mask ? set_control(kEnable) : set_masked(v, false);
            // ...and delivered by the unmask itself.
            if (triggers(v) == before || pending(v)) lost_pending = true;
            if (round % 5 == 0) {
                set_control(0);
                set_control(kEnable);
            }
        }
        stop = true;
    });
    EXPECT_TRUE(keep_queues_busy(stop)) << "a queue stopped completing requests";
    cpu.join();
    EXPECT_FALSE(lost_pending) << "a masked interrupt was not pending, or not delivered on unmask";
    // Interrupts raised while MSI-X was off are gone by design; one more request per queue,
    // with everything enabled, must be delivered with all the completions before it.
    for (uint16_t q = 0; q < kQueues; ++q) submit(q);
    for (uint16_t q = 0; q < kQueues; ++q) {
        const uint16_t last = submitted[q];
        EXPECT_TRUE(wait_for([&] { return seen_used[q].load() == last; }))
            << "queue " << q << ": completions up to " << last << ", delivered up to "
            << seen_used[q].load();
    }
    EXPECT_EQ(spurious.load(), 0u);
    EXPECT_EQ(misrouted.load(), 0u);
    EXPECT_EQ(driver->status(), testing::PciDriver::kDriverOkStatus);
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
