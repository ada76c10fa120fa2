// Issue 14's reset rule over virtio-pci, as a guest meets it: the driver writes 0 to
// device_status (on a "vCPU" thread, through the MMIO dispatch a vCPU exit uses) while a
// request is in flight on an I/O thread.  The write returns only once that request is done,
// and after it no completion reaches the used ring or the MSI-X vector.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "devices/pci/test_harness.h"
#include "devices/virtio/pci/test_pci_driver.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::pci {
namespace {

using namespace std::chrono_literals;
using devices::testing::PciAddr;
namespace vt = ::mvmm::devices::virtio::testing;

// A one-queue device whose requests block until the test releases them.
class GatedDevice final : public Device {
  public:
    GatedDevice(boost::asio::io_context& io, vt::GatedHandler& handler)
        : handler_(handler), workers_(io, "gated", counters_) {}

    uint32_t device_id() const override { return 2; }
    uint64_t features() const override { return kFeatureVersion1; }
    uint16_t num_queues() const override { return 1; }
    uint16_t max_queue_size() const override { return 16; }
    void read_config(uint64_t, std::span<uint8_t> data) const override {
        std::ranges::fill(data, 0);
    }
    void write_config(uint64_t, std::span<const uint8_t>) override {}
    bool activate(ActivateContext context) override {
        return workers_.start(context, 1, 16, [&](uint16_t) { return &handler_; });
    }
    void reset() override { workers_.stop(); }
    bool needs_reset() const override { return counters_.needs_reset.load(); }

  private:
    vt::GatedHandler& handler_;
    QueueCounters counters_;
    QueueWorkers workers_;
};

class ResetOverPciTest : public ::testing::Test {
  protected:
    void SetUp() override {
        const auto at = h.bridge.attach(
            std::make_shared<VirtioPciFunction>(std::make_unique<GatedDevice>(io, handler),
                                                h.platform, guest.memory()),
            devices::pci::RootBusSlot{});
        driver_ = std::make_unique<testing::PciDriver>(h, PciAddr{0, at.device, at.function});
        driver().assign_bar(0xc000'0000);
        driver().enable_msix(2);
        driver().negotiate(kFeatureVersion1);
        driver().setup_queue(0, ring.config(), 1);
        driver().set_status(testing::PciDriver::kDriverOkStatus);
        ASSERT_EQ(driver().status(), testing::PciDriver::kDriverOkStatus);
    }

    void submit() {
        const GuestAddr in = guest.alloc(1);
        const vt::TestDriver::Buffer chain[] = {{in, 1, true}};
        ring.add_chain(chain);
    }
    unsigned queue_interrupts() const { return h.platform.vectors.at(1)->triggers; }

    boost::asio::io_context io;
    devices::testing::PciHarness h;
    vt::TestGuest guest;
    vt::GatedHandler handler;
    vt::TestDriver ring{guest, 16};
    std::unique_ptr<testing::PciDriver> driver_;
    testing::PciDriver& driver() { return *driver_; }
};

TEST_F(ResetOverPciTest, ResetWaitsForTheRequestInFlightAndNothingReachesTheGuestAfterIt) {
    vt::IoThread io_thread(io);
    submit();
    submit();
    driver().kick(0);
    ASSERT_TRUE(handler.wait_entered(1));

    auto reset = std::async(std::launch::async, [&] { driver().set_status(0); });  // a vCPU
    EXPECT_EQ(reset.wait_for(50ms), std::future_status::timeout)
        << "the status write returned while a request was in flight";
    handler.release();
    reset.get();
    EXPECT_EQ(driver().status(), 0);

    const uint16_t used = ring.used_idx();
    const unsigned interrupts = queue_interrupts();
    EXPECT_GE(used, 1) << "the request in flight completed before the reset returned";
    EXPECT_EQ(used, handler.completed());
    submit();
    driver().kick(0);  // a stale kick after the reset
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(ring.used_idx(), used);
    EXPECT_EQ(queue_interrupts(), interrupts);
    EXPECT_EQ(handler.completed(), used);
}

TEST_F(ResetOverPciTest, TheDeviceWorksAgainAfterTheReset) {
    vt::IoThread io_thread(io);
    handler.release();
    driver().set_status(0);
    vt::TestDriver fresh{guest, 16};
    driver().enable_msix(2);
    driver().negotiate(kFeatureVersion1);
    driver().setup_queue(0, fresh.config(), 1);
    driver().set_status(testing::PciDriver::kDriverOkStatus);
    const GuestAddr in = guest.alloc(1);
    const vt::TestDriver::Buffer chain[] = {{in, 1, true}};
    fresh.add_chain(chain);
    driver().kick(0);
    ASSERT_TRUE(vt::eventually([&] { return fresh.used_idx() == 1; }));
    EXPECT_EQ(guest.read(in, 1)[0], vt::GatedHandler::done_byte);
}

}  // namespace
}  // namespace mvmm::devices::virtio::pci
