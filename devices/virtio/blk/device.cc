#include "devices/virtio/blk/device.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <cstddef>
#include <mutex>
#include <stdexcept>

namespace mvmm::devices::virtio::blk {
namespace {

constexpr uint64_t bit(unsigned n) {
    return 1ull << n;
}
constexpr uint64_t kFeatureSegMax = bit(2);
constexpr uint64_t kFeatureReadOnly = bit(5);
constexpr uint64_t kFeatureBlkSize = bit(6);
constexpr uint64_t kFeatureFlush = bit(9);
constexpr uint64_t kFeatureTopology = bit(10);
constexpr uint64_t kFeatureMultiQueue = bit(12);
constexpr uint64_t kFeatureDiscard = bit(13);
constexpr uint64_t kFeatureWriteZeroes = bit(14);

constexpr uint32_t kMaxDiscardSectors = 1u << 21;  // 1 GiB per segment; hole punching is cheap
constexpr uint32_t kMaxDiscardSegments = 32;
// 128 MiB: where fallocate cannot zero, the I/O thread writes the zeroes itself, and reset()
// waits for it.
constexpr uint32_t kMaxWriteZeroesSectors = 1u << 18;
constexpr uint32_t kMaxWriteZeroesSegments = 1;
constexpr uint32_t kDiscardAlignmentSectors = 8;  // host filesystems deallocate 4 KiB blocks

// struct virtio_blk_config, little-endian like the host; what is not offered reads 0.
struct ConfigSpace {
    uint64_t capacity = 0;
    uint32_t size_max = 0;
    uint32_t seg_max = 0;
    uint16_t cylinders = 0;
    uint8_t heads = 0;
    uint8_t sectors = 0;
    uint32_t blk_size = 0;
    uint8_t physical_block_exp = 0;
    uint8_t alignment_offset = 0;
    uint16_t min_io_size = 0;
    uint32_t opt_io_size = 0;
    uint8_t writeback = 0;
    uint8_t unused0 = 0;
    uint16_t num_queues = 0;
    uint32_t max_discard_sectors = 0;
    uint32_t max_discard_seg = 0;
    uint32_t discard_sector_alignment = 0;
    uint32_t max_write_zeroes_sectors = 0;
    uint32_t max_write_zeroes_seg = 0;
    uint8_t write_zeroes_may_unmap = 0;
    uint8_t unused1[3] = {};
};
static_assert(offsetof(ConfigSpace, blk_size) == 20);
static_assert(offsetof(ConfigSpace, num_queues) == 34);
static_assert(offsetof(ConfigSpace, write_zeroes_may_unmap) == 56);

uint16_t checked_queues(uint16_t queues) {
    if (queues < 1 || queues > kMaxQueues)
        throw std::invalid_argument("virtio-blk: queues must be 1 to " +
                                    std::to_string(kMaxQueues));
    return queues;
}

uint64_t offered_features(const DiskConfig& config) {
    uint64_t features = kFeatureVersion1 | kFeatureIndirectDesc | kFeatureEventIdx |
                        kFeatureSegMax | kFeatureBlkSize | kFeatureFlush | kFeatureTopology;
    if (config.queues > 1) features |= kFeatureMultiQueue;
    features |= config.read_only ? kFeatureReadOnly : kFeatureDiscard | kFeatureWriteZeroes;
    return features;
}

std::vector<uint8_t> make_config_space(const DiskInfo& info, uint16_t num_queues) {
    const ConfigSpace config{
        .capacity = info.capacity_sectors,
        .seg_max = BlkDevice::kQueueSize - 2,  // a chain also holds the header and the status
        .blk_size = kSectorSize,
        .min_io_size = 1,
        .num_queues = num_queues,
        .max_discard_sectors = info.max_discard_sectors,
        .max_discard_seg = info.max_discard_segments,
        .discard_sector_alignment = kDiscardAlignmentSectors,
        .max_write_zeroes_sectors = info.max_write_zeroes_sectors,
        .max_write_zeroes_seg = info.max_write_zeroes_segments,
        .write_zeroes_may_unmap = 1,
    };
    const auto* bytes = reinterpret_cast<const uint8_t*>(&config);
    return std::vector<uint8_t>(bytes, bytes + sizeof config);
}

}  // namespace

// One queue's life between activate() and reset(): wait for a kick on the io_context, drain
// the ring in batches, complete each chain, notify.  Handlers hold a shared_ptr, so the
// worker outlives a handler still queued after stop(); such a handler sees stopped_ and
// touches nothing else.
class BlkDevice::QueueWorker : public std::enable_shared_from_this<QueueWorker> {
  public:
    QueueWorker(BlkDevice& device, uint16_t index, SplitQueue queue, Interrupt& interrupt,
                const EventFd& kick, bool write_through);

    void start();
    // After it returns no handler touches the queue, the device or the interrupt.
    void stop();

  private:
    enum class Drained { Idle, More };

    void resume();
    void on_kick(const boost::system::error_code& error);
    void run_batch();  // requires mutex_, !stopped_
    Result<Drained, RingError> drain();
    void wait_for_kick();
    void fail(std::string_view why);  // requires mutex_

    BlkDevice& device_;
    const uint16_t index_;
    SplitQueue queue_;
    Interrupt& interrupt_;
    const bool write_through_;
    boost::asio::strand<boost::asio::io_context::executor_type> strand_;
    boost::asio::posix::stream_descriptor kick_;  // a dup of the transport's eventfd
    std::mutex mutex_;  // held while a batch runs; stop() takes it to wait for that batch
    bool stopped_ = false;
};

BlkDevice::QueueWorker::QueueWorker(BlkDevice& device, uint16_t index, SplitQueue queue,
                                    Interrupt& interrupt, const EventFd& kick, bool write_through)
    : device_(device),
      index_(index),
      queue_(std::move(queue)),
      interrupt_(interrupt),
      write_through_(write_through),
      strand_(boost::asio::make_strand(device.io_)),
      kick_(device.io_) {
    const int fd = static_cast<int>(
        check_syscall(::fcntl(kick.get(), F_DUPFD_CLOEXEC, 0), "dup of a queue kick eventfd"));
    boost::system::error_code error;
    kick_.assign(fd, error);
    if (error) {
        ::close(fd);  // assign() did not take it
        throw boost::system::system_error(error, "watching a queue kick eventfd");
    }
}

void BlkDevice::QueueWorker::start() {
    // Drain once first: a driver may have queued buffers before DRIVER_OK.
    boost::asio::post(strand_, [self = shared_from_this()] { self->resume(); });
}

void BlkDevice::QueueWorker::stop() {
    std::lock_guard lock(mutex_);
    stopped_ = true;
    boost::system::error_code ignored;
    kick_.close(ignored);  // the pending wait completes with operation_aborted
}

void BlkDevice::QueueWorker::resume() {
    std::lock_guard lock(mutex_);
    if (!stopped_) run_batch();
}

void BlkDevice::QueueWorker::on_kick(const boost::system::error_code& error) {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    if (error) return fail("waiting for kicks failed: " + error.message());
    // Consume the kick before draining, so a kick during the batch wakes us again.
    uint64_t kicks;
    [[maybe_unused]] auto n = ::read(kick_.native_handle(), &kicks, sizeof kicks);
    run_batch();
}

void BlkDevice::QueueWorker::run_batch() {
    try {
        auto drained = drain();
        if (!drained) return fail(to_string(drained.error()));
        if (queue_.should_notify()) interrupt_.notify_queue(index_);
        if (*drained == Drained::More)
            boost::asio::post(strand_, [self = shared_from_this()] { self->resume(); });
        else
            wait_for_kick();
    } catch (const std::exception& e) {
        // Out of memory or descriptors: a queue that silently stopped would hang the guest.
        fail(std::string("stopped by a host error: ") + e.what());
    }
}

// At most a queue's worth of chains per batch, so one busy queue cannot starve the others
// that share its I/O thread.
Result<BlkDevice::QueueWorker::Drained, RingError> BlkDevice::QueueWorker::drain() {
    uint32_t budget = queue_.size();
    for (;;) {
        queue_.disable_notifications();
        for (; budget > 0; --budget) {
            auto popped = queue_.pop();
            if (!popped) return Unexpected{popped.error()};
            if (!*popped) break;
            const DescriptorChain& chain = **popped;
            queue_.push_used(chain.head, device_.complete(chain, write_through_));
        }
        if (budget == 0) return Drained::More;
        if (!queue_.enable_notifications()) return Drained::Idle;
    }
}

void BlkDevice::QueueWorker::wait_for_kick() {
    kick_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     boost::asio::bind_executor(
                         strand_, [self = shared_from_this()](const boost::system::error_code& e) {
                             self->on_kick(e);
                         }));
}

void BlkDevice::QueueWorker::fail(std::string_view why) {
    stopped_ = true;
    boost::system::error_code ignored;
    kick_.close(ignored);
    device_.fail_queue(index_, why);
    // virtio 1.2, 2.1.2: after setting DEVICE_NEEDS_RESET, send a config change notification.
    interrupt_.notify_config();
}

BlkDevice::BlkDevice(const DiskConfig& config, boost::asio::io_context& io)
    : image_(DiskImage::open(config)),
      serial_(disk_serial(config)),
      info_{.capacity_sectors = image_.size() / kSectorSize,
            .read_only = config.read_only,
            .max_discard_sectors = kMaxDiscardSectors,
            .max_discard_segments = kMaxDiscardSegments,
            .max_write_zeroes_sectors = kMaxWriteZeroesSectors,
            .max_write_zeroes_segments = kMaxWriteZeroesSegments},
      features_(offered_features(config)),
      num_queues_(checked_queues(config.queues)),
      config_space_(make_config_space(info_, num_queues_)),
      io_(io) {}

BlkDevice::~BlkDevice() {
    stop_workers();
}

void BlkDevice::read_config(uint64_t offset, std::span<uint8_t> data) const {
    std::fill(data.begin(), data.end(), 0);
    if (offset >= config_space_.size()) return;
    const size_t n = std::min<uint64_t>(data.size(), config_space_.size() - offset);
    std::copy_n(config_space_.begin() + static_cast<ptrdiff_t>(offset), n, data.begin());
}

void BlkDevice::write_config(uint64_t offset, std::span<const uint8_t> data) {
    // Nothing is writable: `writeback` is only writable with VIRTIO_BLK_F_CONFIG_WCE.
    spdlog::debug("virtio-blk {}: ignored config write of {} bytes at {}", image_.path(),
                  data.size(), offset);
}

bool BlkDevice::activate(ActivateContext context) {
    stop_workers();
    const std::string& path = image_.path();
    if (context.queues.size() != num_queues_ || context.kicks.size() != num_queues_) {
        spdlog::error("virtio-blk {}: activated with {} queues and {} kick eventfds, expected {}",
                      path, context.queues.size(), context.kicks.size(), num_queues_);
        return false;
    }
    // Without FLUSH negotiated, a completed write must already be stable (virtio 1.2, 5.2.6.2).
    const bool write_through = !(context.features & kFeatureFlush);
    std::vector<std::shared_ptr<QueueWorker>> workers;
    try {
        for (uint16_t i = 0; i < num_queues_; ++i) {
            if (!context.queues[i].ready) continue;  // drivers may use fewer queues
            auto queue =
                SplitQueue::create(context.memory, context.queues[i], kQueueSize, context.features);
            if (!queue) {
                spdlog::error("virtio-blk {}: queue {}: {}", path, i, to_string(queue.error()));
                return false;
            }
            if (!context.kicks[i]) {
                spdlog::error("virtio-blk {}: queue {} has no kick eventfd", path, i);
                return false;
            }
            workers.push_back(std::make_shared<QueueWorker>(*this, i, std::move(queue).value(),
                                                            context.interrupt, *context.kicks[i],
                                                            write_through));
        }
    } catch (const std::exception& e) {
        spdlog::error("virtio-blk {}: cannot start the queues: {}", path, e.what());
        return false;
    }
    workers_ = std::move(workers);
    for (auto& worker : workers_) worker->start();
    return true;
}

void BlkDevice::reset() {
    stop_workers();
    needs_reset_.store(false);
}

void BlkDevice::stop_workers() {
    for (auto& worker : workers_) worker->stop();
    workers_.clear();
}

uint32_t BlkDevice::complete(const DescriptorChain& chain, bool write_through) {
    ++counters_.requests;
    Status status = Status::Ok;
    auto request = parse(chain, info_);
    if (!request) {
        ++counters_.bad_requests;
        spdlog::debug("virtio-blk {}: bad request: {}", image_.path(), to_string(request.error()));
        if (request.error() == BlkError::NoStatusByte) return 0;
        status = status_for(request.error());
    } else if (auto done = execute(*request, image_, serial_, write_through); !done) {
        ++counters_.io_errors;
        spdlog::log(io_error_logged_.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                    "virtio-blk {}: I/O error: {}", image_.path(), done.error().message());
        status = Status::IoError;
    }
    const auto byte = static_cast<uint8_t>(status);
    chain.writable.copy_from(chain.writable.size() - 1, std::span(&byte, 1));
    // As QEMU does: the status byte ends the writable part, so all of it counts as written.
    return static_cast<uint32_t>(chain.writable.size());
}

void BlkDevice::fail_queue(uint16_t index, std::string_view why) {
    ++counters_.failed_queues;
    needs_reset_.store(true);
    spdlog::log(ring_error_logged_.exchange(true) ? spdlog::level::debug : spdlog::level::err,
                "virtio-blk {}: queue {}: {}; the device needs a reset", image_.path(), index, why);
}

}  // namespace mvmm::devices::virtio::blk
