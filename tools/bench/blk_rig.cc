#include "tools/bench/blk_rig.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <exception>
#include <future>
#include <random>
#include <stdexcept>

#include "devices/virtio/blk/device.h"
#include "devices/virtio/pci/function.h"

namespace mvmm::bench {
namespace {

namespace vt = devices::virtio::testing;
using devices::virtio::QueueConfig;

constexpr uint64_t kPage = 4096;
constexpr uint16_t kRingSize = devices::virtio::kDefaultQueueSize;  // the rig disk's maximum
constexpr uint32_t kBlkIn = 0;
constexpr uint8_t kStatusPending = 0xff;
constexpr GuestAddr kBar(0xc000'0000);

uint64_t request_bytes(Workload workload) {
    return workload == Workload::rand4k ? 4 * 1024 : 64 * 1024;
}

// virtio 1.2, 2.7.10: should the driver kick, having moved avail idx from `old_idx` to
// `new_idx`, when the device asked to be kicked at `event`?
bool need_event(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
    return uint16_t(new_idx - event - 1) < uint16_t(new_idx - old_idx);
}

class MsiEventFd : public devices::MsiVector {
  public:
    explicit MsiEventFd(const EventFd& fd) : fd_(fd) {}
    void route(const devices::MsiMessage&) override {}
    void trigger() override { fd_.signal(); }

  private:
    const EventFd& fd_;
};

// Until an eventfd is signalled, or 10 s; consumes the signal.
void wait_for(const EventFd& fd, uint16_t queue) {
    pollfd p{.fd = fd.get(), .events = POLLIN, .revents = 0};
    const int ready = ::poll(&p, 1, 10'000);
    if (ready == 0)
        throw std::runtime_error("queue " + std::to_string(queue) + " stalled for 10 s");
    uint64_t count;
    if (ready < 0 || ::read(fd.get(), &count, sizeof count) != sizeof count)
        throw std::runtime_error("waiting for an interrupt failed");
}

}  // namespace

uint64_t pattern_word(uint64_t offset) {
    return (offset / 8) * 0x9e37'79b9'7f4a'7c15ull ^ 0x6d76'6d6d;
}

PatternImage::PatternImage(const std::string& dir, uint64_t size) : size_(size) {
    path_ = dir + "/mvmm-request-bench-XXXXXX";
    Fd fd(::mkstemp(path_.data()));
    if (!fd.valid()) throw_errno("creating an image in " + dir);
    std::vector<uint64_t> chunk(1 << 17);  // 1 MiB
    for (uint64_t at = 0; at < size; at += chunk.size() * 8) {
        for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = pattern_word(at + i * 8);
        const size_t bytes = std::min<uint64_t>(chunk.size() * 8, size - at);
        if (::pwrite(fd.get(), chunk.data(), bytes, static_cast<off_t>(at)) != ssize_t(bytes))
            throw_errno("writing " + path_);
    }
}

PatternImage::~PatternImage() {
    ::unlink(path_.c_str());
}

const char* to_string(Workload workload) {
    return workload == Workload::rand4k ? "rand4k" : "seq64k";
}

std::unique_ptr<devices::MsiVector> EventFdPlatform::allocate_msi_vector() {
    return std::make_unique<MsiEventFd>(vectors_.emplace_back());
}

void EventFdPlatform::add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) {
    if (len == 2) ioeventfds_.emplace_back(addr, fd.get());
}

void EventFdPlatform::remove_ioeventfd(GuestAddr addr, uint32_t, const EventFd& fd) {
    std::erase(ioeventfds_, std::pair{addr, fd.get()});
}

int EventFdPlatform::ioeventfd(GuestAddr addr) const {
    for (const auto& [at, fd] : ioeventfds_)
        if (at == addr) return fd;
    return -1;
}

// One queue's driver: `depth` request slots, each an indirect table (header, the data pages,
// status) written once; a request rewrites the header's sector and the status byte only.
class BlkRig::QueueLoad {
  public:
    QueueLoad(vt::TestGuest& guest, const BlkRig::Config& config, uint16_t index)
        : guest_(guest),
          config_(config),
          index_(index),
          ring_(guest, kRingSize),
          random_(index + 1) {
        const uint64_t bytes = request_bytes(config.workload);
        const uint64_t region = config.image.size() / config.queues;
        region_start_ = sequential_ = index * region;
        region_end_ = region_start_ + region / bytes * bytes;
        for (uint16_t s = 0; s < config.depth; ++s) add_slot(s, bytes);
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
                    wait_for(irq, index_);
                    ++result.interrupts;
                    continue;
                }
            }
            const uint16_t old_avail = avail_;
            for (; last_used_ != used; ++last_used_, ++result.requests) {
                const uint32_t slot = ring_.used(last_used_).id;
                check(slot);
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
    struct Slot {
        GuestAddr header, data, status;
        uint64_t offset = 0;
    };

    void add_slot(uint16_t s, uint64_t bytes) {
        Slot slot{guest_.alloc(16), guest_.alloc(bytes, kPage), guest_.alloc(1), 0};
        const uint32_t header[2] = {kBlkIn, 0};
        guest_.write(slot.header, std::span(reinterpret_cast<const uint8_t*>(header), 8));
        std::vector<vt::Desc> table{{slot.header.value(), 16, vt::kDescNext, 1}};
        for (uint64_t page = 0; page < bytes / kPage; ++page)
            table.push_back({(slot.data + page * kPage).value(), uint32_t(kPage),
                             vt::kDescWrite | vt::kDescNext, uint16_t(table.size() + 1)});
        table.push_back({slot.status.value(), 1, vt::kDescWrite, 0});
        const GuestAddr at = guest_.alloc(16 * table.size(), 16);
        guest_.write(at,
                     std::span(reinterpret_cast<const uint8_t*>(table.data()), 16 * table.size()));
        ring_.set_descriptor(s, {at.value(), uint32_t(16 * table.size()), vt::kDescIndirect, 0});
        slots_.push_back(slot);
    }

    uint64_t next_offset() {
        const uint64_t bytes = request_bytes(config_.workload);
        if (config_.workload == Workload::rand4k)
            return random_() % (config_.image.size() / bytes) * bytes;
        const uint64_t offset = sequential_;
        sequential_ += bytes;
        if (sequential_ == region_end_) sequential_ = region_start_;
        return offset;
    }

    void submit(uint16_t s) {
        Slot& slot = slots_[s];
        slot.offset = next_offset();
        const uint64_t sector = slot.offset / 512;
        guest_.write(slot.header + 8, std::span(reinterpret_cast<const uint8_t*>(&sector), 8));
        guest_.write(slot.status, std::span(&kStatusPending, 1));
        ring_.publish(s);
        ++avail_;
    }

    void check(uint32_t s) const {
        if (s >= slots_.size()) throw std::runtime_error("used ring names an unknown request");
        const Slot& slot = slots_[s];
        // Word by word, no buffer: the driver side allocates nothing per request either, so
        // the count of allocations is the device's.
        const uint8_t status = guest_.memory().read<uint8_t>(slot.status).value();
        if (status != 0)
            throw std::runtime_error("a read completed with status " + std::to_string(status));
        const uint64_t bytes = request_bytes(config_.workload);
        const auto data = guest_.memory().slice(slot.data, bytes).value();
        const uint64_t step = config_.verify_every_word ? 8 : kPage;
        for (uint64_t at = 0; at < bytes; at += step) {
            if (data.read_obj<uint64_t>(at).value() != pattern_word(slot.offset + at))
                throw std::runtime_error("queue " + std::to_string(index_) +
                                         " read a wrong byte at image offset " +
                                         std::to_string(slot.offset + at));
        }
    }

    vt::TestGuest& guest_;
    const BlkRig::Config& config_;
    const uint16_t index_;
    vt::TestDriver ring_;
    std::vector<Slot> slots_;  // slot s is descriptor s, the head of its request
    std::minstd_rand random_;
    uint64_t region_start_ = 0, region_end_ = 0, sequential_ = 0;  // this queue's stream
    uint16_t avail_ = 0, last_used_ = 0;
};

namespace {

// Guest RAM for the rings and every slot's buffers, with room to spare.
uint64_t guest_ram(const BlkRig::Config& config) {
    const uint64_t per_slot = request_bytes(config.workload) + 2 * kPage;
    return (1ull << 20) + uint64_t{config.queues} * (64 * 1024 + config.depth * per_slot);
}

}  // namespace

BlkRig::BlkRig(const Config& config) : config_(config), guest_(guest_ram(config)) {
    for (uint16_t q = 0; q < config.queues; ++q)
        queues_.push_back(std::make_unique<QueueLoad>(guest_, config_, q));
    devices::virtio::blk::DiskConfig disk;
    disk.path = config.image.path();
    disk.read_only = true;
    disk.queues = config.queues;
    disk.request_alloc = config.request_alloc;
    auto function = std::make_shared<devices::virtio::pci::VirtioPciFunction>(
        std::make_unique<devices::virtio::blk::BlkDevice>(disk, io_), platform_, guest_.memory());
    const auto at = harness_.bridge.attach(std::move(function), devices::pci::RootBusSlot{});
    driver_ = std::make_unique<devices::virtio::pci::testing::PciDriver>(
        harness_, devices::testing::PciAddr{0, at.device, at.function});
    initialize();
    start_io_threads();
}

// What virtio_pci_modern's probe and virtio_blk's init_vq do.
void BlkRig::initialize() {
    using devices::virtio::pci::CommonConfig;
    driver_->assign_bar(kBar.value());
    driver_->enable_msix(uint16_t(config_.queues + 1));
    driver_->negotiate(driver_->device_features());
    driver_->set_common<uint16_t>(offsetof(CommonConfig, config_msix_vector), 0);
    for (uint16_t q = 0; q < config_.queues; ++q) {
        driver_->setup_queue(q, queues_[q]->config(), uint16_t(q + 1));
        const auto notify_off = driver_->common<uint16_t>(offsetof(CommonConfig, queue_notify_off));
        notify_.push_back(kBar + devices::virtio::pci::VirtioPciFunction::kNotifyOffset +
                          uint64_t{notify_off} *
                              devices::virtio::pci::VirtioPciFunction::kNotifyMultiplier);
    }
    driver_->set_status(devices::virtio::pci::testing::PciDriver::kDriverOkStatus);
    if (driver_->status() != devices::virtio::pci::testing::PciDriver::kDriverOkStatus)
        throw std::runtime_error("the disk refused DRIVER_OK");
}

void BlkRig::start_io_threads() {
    std::vector<std::promise<pid_t>> started(config_.io_threads);
    for (auto& promise : started) {
        io_threads_.emplace_back([this, &promise] {
            promise.set_value(static_cast<pid_t>(::syscall(SYS_gettid)));
            io_.run();
        });
    }
    for (auto& promise : started) io_tids_.push_back(promise.get_future().get());
}

BlkRig::~BlkRig() {
    driver_->set_status(0);  // the device reset waits for the requests in flight
    work_.reset();
    io_.stop();
    for (auto& thread : io_threads_) thread.join();
}

std::vector<pid_t> BlkRig::io_thread_ids() const {
    return io_tids_;
}

// What a guest's notify write does under KVM: the ioeventfd, else an exit into the device.
void BlkRig::kick(uint16_t queue) {
    const int fd = platform_.ioeventfd(notify_[queue]);
    if (fd < 0) {
        harness_.mmio_write<uint16_t>(notify_[queue].value(), queue);
        return;
    }
    const uint64_t one = 1;
    if (::write(fd, &one, sizeof one) != sizeof one) throw_errno("kick");
}

LoadResult BlkRig::run(uint64_t per_queue, const std::function<void()>& begin,
                       const std::function<void()>& end) {
    std::barrier warm(config_.queues + 1);
    std::vector<LoadResult> results(config_.queues);
    std::vector<std::exception_ptr> errors(config_.queues);
    std::vector<std::thread> threads;
    for (uint16_t q = 0; q < config_.queues; ++q) {
        threads.emplace_back([&, q] {
            const auto& irq = platform_.vector(q + 1u);
            auto kick = [this, q] { this->kick(q); };
            try {
                queues_[q]->run(2ull * config_.depth, kick, irq);
                warm.arrive_and_wait();  // every queue is warm
                warm.arrive_and_wait();  // begin() ran
                results[q] = queues_[q]->run(per_queue, kick, irq);
            } catch (...) {
                errors[q] = std::current_exception();
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
    for (const auto& r : results) {
        total.requests += r.requests;
        total.kicks += r.kicks;
        total.interrupts += r.interrupts;
    }
    return total;
}

}  // namespace mvmm::bench
