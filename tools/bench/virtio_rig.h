// A virtio-blk disk or a virtio-scsi controller on the real device code and I/O threads, without
// a guest CPU, for the request-path benchmark (tools/request_bench.cc).  The bench plays Linux's
// virtio_pci_modern and the device's driver through the PCI harness (the ECAM and MMIO dispatch
// a vCPU exit takes), one thread per request queue as blk-mq has one per CPU; notify writes
// signal the queue's ioeventfd as KVM does, and MSI-X vectors signal an eventfd the driver waits
// on, as irqfds deliver them.  Each queue keeps `depth` requests in flight; what they are (reads,
// or a mix of every request the device serves) is the workload's, and how they are laid out and
// checked the device's (requests.h).
#pragma once

#include <sys/types.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/fd.h"
#include "bench/requests.h"
#include "bench/rig_parts.h"
#include "devices/pci/test_harness.h"
#include "devices/platform.h"
#include "devices/virtio/pci/test_pci_driver.h"
#include "devices/virtio/queue_counters.h"
#include "devices/virtio/test_queue_driver.h"
#include "mem/slot_pool.h"

namespace mvmm::bench {

struct LoadResult {
    uint64_t requests = 0;
    uint64_t io_thread_requests = 0;  // of them, on queues the I/O threads serve
    uint64_t kicks = 0;               // notify writes the driver made
    uint64_t interrupts = 0;          // times the driver slept until an interrupt
};

class VirtioRig {
  public:
    struct Config {
        const PatternImage& image;
        DeviceKind device = DeviceKind::blk;
        Workload workload = Workload::rand4k;
        uint16_t queues = 4;  // request queues
        uint16_t depth = 32;  // requests in flight per queue
        SlotSource request_alloc = SlotSource::pool;
        DriverRequests::BlkIo blk_io;  // blk's aio= and cache=
        unsigned io_threads = 2;
        bool verify_every_word = false;  // else the first word of every 4 KiB read
    };
    // Opens the image as the device, initializes it as Linux does (all offered features, one
    // MSI-X vector per queue, every queue set up) and starts the I/O threads.
    explicit VirtioRig(const Config& config);
    ~VirtioRig();  // resets the device, then stops the I/O threads
    VirtioRig(const VirtioRig&) = delete;
    VirtioRig& operator=(const VirtioRig&) = delete;

    // Runs `per_queue` requests on every request queue after a warm-up of 2 x depth.  `begin`
    // runs once every queue is warm and before any measured request, `end` once every queue is
    // done.  Throws on a wrong answer or byte, a bad status or a queue that stalls for 10 s.
    LoadResult run(uint64_t per_queue, const std::function<void()>& begin,
                   const std::function<void()>& end);

    // The I/O threads' kernel thread ids (their CPU time is the device's).
    std::vector<pid_t> io_thread_ids() const;
    // Heap allocations the I/O threads have made so far (0 where nothing counts them).
    uint64_t io_thread_allocations() const;
    // The device's statistics (devices/virtio/queue_counters.h).
    devices::virtio::DeviceStatistics statistics() const { return counters_->statistics(); }

  private:
    class QueueLoad;
    void initialize();
    void start_io_threads();
    void kick(uint16_t queue);

    Config config_;
    std::unique_ptr<const DriverRequests> requests_;
    boost::asio::io_context io_;  // outlives the device and its workers
    EventFdPlatform platform_;    // outlives the function, which unregisters its ioeventfds
    devices::virtio::testing::TestGuest guest_;
    std::vector<std::unique_ptr<QueueLoad>> queues_;  // one per device queue; null: no load
    std::vector<std::unique_ptr<devices::virtio::testing::TestDriver>> idle_rings_;  // the rest
    devices::testing::PciHarness harness_;
    const devices::virtio::QueueCounters* counters_ = nullptr;  // the device's
    std::unique_ptr<devices::virtio::pci::testing::PciDriver> driver_;
    std::vector<GuestAddr> notify_;  // per device queue
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_{
        io_.get_executor()};
    std::vector<std::thread> io_threads_;
    std::vector<pid_t> io_tids_;
    std::vector<const std::atomic<uint64_t>*> io_allocations_;  // each I/O thread's count
};

}  // namespace mvmm::bench
