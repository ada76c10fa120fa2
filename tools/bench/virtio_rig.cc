#include "bench/virtio_rig.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <future>
#include <random>
#include <stdexcept>

#include "bench/alloc_counter.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/queue_size.h"

namespace mvmm::bench {
namespace {

namespace vt = devices::virtio::testing;
using devices::virtio::QueueConfig;

constexpr uint16_t kRingSize = devices::virtio::kDefaultQueueSize;  // the rig device's maximum
constexpr GuestAddr kBar(0xc000'0000);

// Where reads and writes go: the image but its scratch MiB.
uint64_t pattern_bytes(const VirtioRig::Config& config) {
    return config.image.size() - kScratchBytes;
}

// virtio 1.2, 2.7.10: should the driver kick, having moved avail idx from `old_idx` to
// `new_idx`, when the device asked to be kicked at `event`?
bool need_event(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
    return uint16_t(new_idx - event - 1) < uint16_t(new_idx - old_idx);
}

}  // namespace

// One queue's driver: `depth` request slots, each an indirect table written once; a request
// rewrites what its position changes and the status only.
class VirtioRig::QueueLoad {
  public:
    QueueLoad(vt::TestGuest& guest, const VirtioRig::Config& config, const DriverRequests& requests,
              uint16_t queue, uint16_t load_index)
        : guest_(guest),
          config_(config),
          requests_(requests),
          queue_(queue),
          ring_(guest, kRingSize),
          random_(load_index + 1) {
        const uint64_t region = pattern_bytes(config) / config.queues;
        region_start_ = sequential_ = load_index % config.queues * region;
        region_end_ = region_start_ + region;
        for (uint16_t s = 0; s < config.depth; ++s) add_slot(s);
    }

    QueueConfig config() const { return ring_.config(); }

    // `count` requests from an empty pipeline to an empty pipeline.
    LoadResult run(uint64_t count, const std::function<void()>& kick, const EventFd& irq) {
        LoadResult result;
        uint64_t submitted = 0;
        auto kick_if_asked = [&](uint16_t old_avail) {
            std::atomic_thread_fence(std::memory_order_seq_cst);  // avail idx before avail_event
            if (need_event(ring_.avail_event(), avail_, old_avail)) {
                kick();
                ++result.kicks;
            }
        };
        const uint16_t before = avail_;
        for (uint16_t s = 0; s < config_.depth && submitted < count; ++s, ++submitted) submit(s);
        kick_if_asked(before);
        while (result.requests < count) {
            uint16_t used = ring_.used_idx();
            if (used == last_used_) {
                ring_.set_used_event(last_used_);
                std::atomic_thread_fence(std::memory_order_seq_cst);
                used = ring_.used_idx();
                if (used == last_used_) {
                    wait_for_interrupt(irq, queue_);
                    ++result.interrupts;
                    continue;
                }
            }
            const uint16_t old_avail = avail_;
            for (; last_used_ != used; ++last_used_, ++result.requests) {
                const uint32_t slot = ring_.used(last_used_).id;
                if (slot >= slots_.size())
                    throw std::runtime_error("used ring names an unknown request");
                requests_.check(guest_, slots_[slot], config_.verify_every_word);
                if (submitted < count) {
                    submit(static_cast<uint16_t>(slot));
                    ++submitted;
                }
            }
            if (avail_ != old_avail) kick_if_asked(old_avail);
        }
        return result;
    }

  private:
    void add_slot(uint16_t s) {
        RequestSlot slot;
        slot.queue = queue_;
        slot.kind = s % requests_.kinds(queue_);
        const std::vector<vt::Desc> table = requests_.lay_out(guest_, slot);
        const GuestAddr at = guest_.alloc(16 * table.size(), 16);
        guest_.write(at,
                     std::span(reinterpret_cast<const uint8_t*>(table.data()), 16 * table.size()));
        ring_.set_descriptor(s, {at.value(), uint32_t(16 * table.size()), vt::kDescIndirect, 0});
        slots_.push_back(slot);
    }

    // Where the next transfer of `bytes` goes: anywhere before the scratch area (rand4k, mixed),
    // or one after another through this queue's part of it (seq64k).
    uint64_t next_offset(uint64_t bytes) {
        if (config_.workload != Workload::seq64k)
            return random_() % (pattern_bytes(config_) / bytes) * bytes;
        if (sequential_ + bytes > region_end_) sequential_ = region_start_;
        const uint64_t offset = sequential_;
        sequential_ += bytes;
        return offset;
    }

    void submit(uint16_t s) {
        RequestSlot& slot = slots_[s];
        if (slot.transfer_bytes) slot.offset = next_offset(slot.transfer_bytes);
        requests_.prepare(guest_, slot);
        ring_.publish(s);
        ++avail_;
    }

    vt::TestGuest& guest_;
    const VirtioRig::Config& config_;
    const DriverRequests& requests_;
    const uint16_t queue_;
    vt::TestDriver ring_;
    std::vector<RequestSlot> slots_;  // slot s is descriptor s, the head of its request
    std::minstd_rand random_;
    uint64_t region_start_ = 0, region_end_ = 0, sequential_ = 0;  // this queue's stream
    uint16_t avail_ = 0, last_used_ = 0;
};

namespace {

// Guest RAM for the rings and every slot's buffers, with room to spare.
uint64_t guest_ram(const VirtioRig::Config& config) {
    constexpr uint64_t kPage = 4096;
    const uint64_t transfer = config.workload == Workload::seq64k ? 64 * 1024 : 4 * 1024;
    const uint64_t per_slot = transfer + 3 * kPage;
    return (1ull << 20) + (config.queues + 2ull) * (64 * 1024 + config.depth * per_slot);
}

std::unique_ptr<const DriverRequests> requests_for(const VirtioRig::Config& config) {
    const uint64_t size = config.image.size();
    return config.device == DeviceKind::blk ? blk_requests(config.workload, size)
                                            : scsi_requests(config.workload, size);
}

}  // namespace

VirtioRig::VirtioRig(const Config& config)
    : config_(config), requests_(requests_for(config)), guest_(guest_ram(config)) {
    const uint16_t device_queues = requests_->device_queues(config.queues);
    queues_.resize(device_queues);
    const auto loaded = requests_->loaded_queues(config.queues);
    for (size_t i = 0; i < loaded.size(); ++i)
        queues_.at(loaded[i]) =
            std::make_unique<QueueLoad>(guest_, config_, *requests_, loaded[i], uint16_t(i));
    for (uint16_t q = 0; q < device_queues; ++q)
        if (!queues_[q]) idle_rings_.push_back(std::make_unique<vt::TestDriver>(guest_, kRingSize));
    auto device = requests_->device(config.image.path(), config.request_alloc, config.queues,
                                    config.blk_io, io_);
    counters_ = device.counters;
    auto function = std::make_shared<devices::virtio::pci::VirtioPciFunction>(
        std::move(device.device), platform_, guest_.memory());
    const auto at = harness_.bridge.attach(std::move(function), devices::pci::RootBusSlot{});
    driver_ = std::make_unique<devices::virtio::pci::testing::PciDriver>(
        harness_, devices::testing::PciAddr{0, at.device, at.function});
    initialize();
    start_io_threads();
}

// What virtio_pci_modern's probe and the device driver's queue set-up do: every queue, with a
// vector each.
void VirtioRig::initialize() {
    using devices::virtio::pci::CommonConfig;
    using devices::virtio::pci::VirtioPciFunction;
    const auto queues = static_cast<uint16_t>(queues_.size());
    driver_->assign_bar(kBar.value());
    driver_->enable_msix(uint16_t(queues + 1));
    driver_->negotiate(driver_->device_features());
    driver_->set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
    auto idle = idle_rings_.begin();
    for (uint16_t q = 0; q < queues; ++q) {
        const QueueConfig ring = queues_[q] ? queues_[q]->config() : (*idle++)->config();
        driver_->setup_queue(q, ring, uint16_t(q + 1));
        const auto notify_off = driver_->common<uint16_t>(offsetof(CommonConfig, queue_notify_off));
        notify_.push_back(kBar + VirtioPciFunction::kNotifyOffset +
                          uint64_t{notify_off} * VirtioPciFunction::kNotifyMultiplier);
    }
    driver_->set_status(devices::virtio::pci::testing::PciDriver::kDriverOkStatus);
    if (driver_->status() != devices::virtio::pci::testing::PciDriver::kDriverOkStatus)
        throw std::runtime_error("the device refused DRIVER_OK");
}

void VirtioRig::start_io_threads() {
    std::vector<std::promise<std::pair<pid_t, const std::atomic<uint64_t>*>>> started(
        config_.io_threads);
    for (auto& promise : started) {
        io_threads_.emplace_back([this, &promise] {
            promise.set_value(
                {static_cast<pid_t>(::syscall(SYS_gettid)), &this_thread_allocation_counter()});
            io_.run();
        });
    }
    for (auto& promise : started) {
        const auto [tid, allocations] = promise.get_future().get();
        io_tids_.push_back(tid);
        io_allocations_.push_back(allocations);
    }
}

VirtioRig::~VirtioRig() {
    driver_->set_status(0);  // the device reset waits for the requests in flight
    work_.reset();
    io_.stop();
    for (auto& thread : io_threads_) thread.join();
}

std::vector<pid_t> VirtioRig::io_thread_ids() const {
    return io_tids_;
}

uint64_t VirtioRig::io_thread_allocations() const {
    uint64_t total = 0;
    for (const auto* count : io_allocations_) total += count->load(std::memory_order_relaxed);
    return total;
}

// What a guest's notify write does under KVM: the ioeventfd, else an exit into the device.
void VirtioRig::kick(uint16_t queue) {
    const int fd = platform_.ioeventfd(notify_[queue]);
    if (fd < 0) {
        harness_.mmio_write<uint16_t>(notify_[queue].value(), queue);
        return;
    }
    const uint64_t one = 1;
    if (::write(fd, &one, sizeof one) != sizeof one) throw_errno("kick");
}

LoadResult VirtioRig::run(uint64_t per_queue, const std::function<void()>& begin,
                          const std::function<void()>& end) {
    const auto loaded = requests_->loaded_queues(config_.queues);
    std::barrier warm(static_cast<ptrdiff_t>(loaded.size() + 1));
    std::vector<LoadResult> results(loaded.size());
    std::vector<std::exception_ptr> errors(loaded.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < loaded.size(); ++i) {
        threads.emplace_back([&, i] {
            const uint16_t q = loaded[i];
            const auto& irq = platform_.vector(q + 1u);
            auto kick = [this, q] { this->kick(q); };
            try {
                queues_[q]->run(2ull * config_.depth, kick, irq);
                warm.arrive_and_wait();  // every queue is warm
                warm.arrive_and_wait();  // begin() ran
                results[i] = queues_[q]->run(per_queue, kick, irq);
            } catch (...) {
                errors[i] = std::current_exception();
                warm.arrive_and_drop();
            }
        });
    }
    warm.arrive_and_wait();
    begin();
    warm.arrive_and_wait();
    for (auto& thread : threads) thread.join();
    end();
    for (auto& error : errors)
        if (error) std::rethrow_exception(error);
    LoadResult total;
    for (size_t i = 0; i < results.size(); ++i) {
        const LoadResult& r = results[i];
        total.requests += r.requests;
        if (requests_->on_io_threads(loaded[i])) total.io_thread_requests += r.requests;
        total.kicks += r.kicks;
        total.interrupts += r.interrupts;
    }
    return total;
}

}  // namespace mvmm::bench
