#include "devices/virtio/queue_worker.h"

#include "devices/virtio/handler_memory.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

namespace mvmm::devices::virtio {
namespace {

// A request's slot: its chain, then room for one part per descriptor the queue holds.  Only
// what a chain uses is ever written.
using Part = GuestBuffers::Part;
constexpr size_t kChainBytes =
    (sizeof(DescriptorChain) + alignof(Part) - 1) / alignof(Part) * alignof(Part);
static_assert(alignof(DescriptorChain) <= alignof(Part));

size_t request_slot_size(uint16_t queue_size) {
    return kChainBytes + queue_size * sizeof(Part);
}

const DescriptorChain& chain_in(const SlotPool::Slot& slot) {
    return *std::launder(reinterpret_cast<const DescriptorChain*>(slot.bytes().data()));
}

std::span<Part> parts_in(const SlotPool::Slot& slot) {
    const auto room = slot.bytes().subspan(kChainBytes);
    return {reinterpret_cast<Part*>(room.data()), room.size() / sizeof(Part)};
}

}  // namespace

// One queue's life between start() and stop(): wait for a kick on the io_context, drain the
// ring in batches, hand each chain to the handler, notify.  A worker has one Asio handler
// queued at a time (a resume or a kick wait, each queueing the next), so one queue runs on
// one thread at a time; mutex_ is only contended by stop().  Handlers hold a shared_ptr, so
// the worker outlives a handler still queued after stop(); such a handler sees stopped_ and
// touches nothing else.
class QueueWorkers::Worker : public std::enable_shared_from_this<Worker> {
  public:
    struct Wiring {
        const std::string& name;
        uint16_t index;
        const EventFd& kick;
        RequestHandler& handler;
        Interrupt& interrupt;
        QueueCounters& counters;
        SlotSource request_alloc;
    };
    Worker(boost::asio::io_context& io, SplitQueue queue, const Wiring& wiring);

    void start();
    uint16_t index() const noexcept { return index_; }
    // Its request pool and heap allocations, for the counters' statistics.
    std::shared_ptr<const QueueRequests> requests() const { return requests_; }
    // After it returns no handler touches the queue, the request handler or the interrupt.
    void stop();

  private:
    enum class Drained { Idle, More, Stopping };

    template <class Function>
    InMemory<Function> in_memory(Function function) {
        return {std::move(function), HandlerAllocator<void>(handler_memory_)};
    }
    void post_resume();
    void resume();
    void on_kick(const boost::system::error_code& error);
    void run_batch(CountedAllocations& counted);  // requires mutex_, !stopped_
    Result<Drained, RingError> drain(CountedAllocations& counted);
    Result<bool, RingError> take();
    bool handle_taken(CountedAllocations& counted);
    void wait_for_kick();
    void fail(std::string_view why);  // requires mutex_

    const std::string& name_;  // the QueueWorkers' name, which outlives every worker
    const uint16_t index_;
    SplitQueue queue_;
    RequestHandler& handler_;
    Interrupt& interrupt_;
    QueueCounters& counters_;
    // Its pool has a slot per request in flight, the queue size of them.
    const std::shared_ptr<QueueRequests> requests_;
    std::vector<SlotPool::Slot> batch_;  // taken off the ring, not handled yet
    boost::asio::io_context& io_;
    HandlerMemory handler_memory_;                // for the one handler queued at a time
    boost::asio::posix::stream_descriptor kick_;  // a dup of the transport's eventfd
    std::mutex mutex_;  // held while a batch runs; stop() takes it to wait for that batch
    bool stopped_ = false;
    std::atomic<bool> stopping_{false};  // set by stop() first: the batch takes no more chains
};

QueueWorkers::Worker::Worker(boost::asio::io_context& io, SplitQueue queue, const Wiring& wiring)
    : name_(wiring.name),
      index_(wiring.index),
      queue_(std::move(queue)),
      handler_(wiring.handler),
      interrupt_(wiring.interrupt),
      counters_(wiring.counters),
      requests_(std::make_shared<QueueRequests>(request_slot_size(queue_.size()), queue_.size(),
                                                wiring.request_alloc)),
      io_(io),
      kick_(io) {
    const int fd = static_cast<int>(check_syscall(::fcntl(wiring.kick.get(), F_DUPFD_CLOEXEC, 0),
                                                  "dup of a queue kick eventfd"));
    boost::system::error_code error;
    kick_.assign(fd, error);
    if (error) {
        ::close(fd);  // assign() did not take it
        throw boost::system::system_error(error, "watching a queue kick eventfd");
    }
    batch_.reserve(queue_.size());
}

void QueueWorkers::Worker::start() {
    // Drain once first: a driver may have queued buffers before DRIVER_OK.
    post_resume();
}

void QueueWorkers::Worker::post_resume() {
    boost::asio::post(io_, in_memory([self = shared_from_this()] { self->resume(); }));
}

void QueueWorkers::Worker::stop() {
    stopping_.store(true);
    std::lock_guard lock(mutex_);
    stopped_ = true;
    boost::system::error_code ignored;
    kick_.close(ignored);  // the pending wait completes with operation_aborted
}

void QueueWorkers::Worker::resume() {
    CountedAllocations counted(*requests_);
    std::lock_guard lock(mutex_);
    if (!stopped_) run_batch(counted);
}

void QueueWorkers::Worker::on_kick(const boost::system::error_code& error) {
    CountedAllocations counted(*requests_);
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    if (error) return fail("waiting for kicks failed: " + error.message());
    counters_.record_notify();
    // Consume the kick before draining, so a kick during the batch wakes us again.
    uint64_t kicks;
    [[maybe_unused]] auto n = ::read(kick_.native_handle(), &kicks, sizeof kicks);
    run_batch(counted);
}

void QueueWorkers::Worker::run_batch(CountedAllocations& counted) {
    try {
        auto drained = drain(counted);
        if (!drained) return fail(to_string(drained.error()));
        if (queue_.should_notify()) interrupt_.notify_queue(index_);
        if (*drained == Drained::Stopping) return;
        if (*drained == Drained::More)
            post_resume();
        else
            wait_for_kick();
    } catch (const std::exception& e) {
        // Out of memory or descriptors: a queue that silently stopped would hang the guest.
        fail(std::string("stopped by a host error: ") + e.what());
    }
}

// One batch: take what the ring holds, as far as slots last, then handle it.  At most a
// queue's worth of chains per batch, so one busy queue cannot starve the others that share
// its I/O thread.
Result<QueueWorkers::Worker::Drained, RingError> QueueWorkers::Worker::drain(
    CountedAllocations& counted) {
    queue_.disable_notifications();
    auto more = take();
    if (!more) return Unexpected{more.error()};
    if (!handle_taken(counted)) return Drained::Stopping;
    if (*more) return Drained::More;
    return queue_.enable_notifications() ? Drained::More : Drained::Idle;
}

// Pops chains into slots until the ring is empty (false) or every slot is in flight (true:
// the rest wait in the ring for the slots to come back).  A slot is taken only for a chain
// the ring holds, so the pool's peak is the most requests in flight.
Result<bool, RingError> QueueWorkers::Worker::take() {
    batch_.clear();
    while (!stopping_.load() && queue_.has_available()) {
        auto slot = requests_->pool.acquire();
        if (!slot) return true;
        auto popped = queue_.pop(parts_in(*slot));
        if (!popped) return Unexpected{popped.error()};
        if (!*popped) return false;
        std::construct_at(reinterpret_cast<DescriptorChain*>(slot->bytes().data()), **popped);
        batch_.push_back(std::move(*slot));
    }
    return false;
}

// Hands the batch to the handler in ring order and returns each chain to the driver; false
// when stop() came first.  The slots go back either way.
bool QueueWorkers::Worker::handle_taken(CountedAllocations& counted) {
    bool completed = true;
    for (const SlotPool::Slot& slot : batch_) {
        if (stopping_.load()) {
            completed = false;
            break;
        }
        const DescriptorChain& chain = chain_in(slot);
        ++counters_.requests;
        const uint32_t written = handler_.handle(chain);
        counted.update();  // what the driver sees returned is counted
        queue_.push_used(chain.head, written);
        counters_.record_used(index_);
    }
    batch_.clear();
    return completed;
}

void QueueWorkers::Worker::wait_for_kick() {
    kick_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     in_memory([self = shared_from_this()](const boost::system::error_code& e) {
                         self->on_kick(e);
                     }));
}

void QueueWorkers::Worker::fail(std::string_view why) {
    stopped_ = true;
    boost::system::error_code ignored;
    kick_.close(ignored);
    counters_.needs_reset.store(true);
    const bool first = counters_.failed_queues.fetch_add(1) == 0;
    spdlog::log(first ? spdlog::level::err : spdlog::level::debug,
                "{}: queue {}: {}; the device needs a reset", name_, index_, why);
    // virtio 1.2, 2.1.2: after setting DEVICE_NEEDS_RESET, send a config change notification.
    interrupt_.notify_config();
}

QueueWorkers::QueueWorkers(boost::asio::io_context& io, std::string name, QueueCounters& counters,
                           SlotSource request_alloc)
    : io_(io), name_(std::move(name)), counters_(counters), request_alloc_(request_alloc) {}

QueueWorkers::~QueueWorkers() {
    stop();
}

bool QueueWorkers::start(const ActivateContext& context, uint16_t num_queues,
                         uint16_t max_queue_size, const HandlerFor& handler_for) {
    stop();
    counters_.record_driver_ok();
    counters_.publish_queues({});  // the last activation's pools go, whatever this one does
    if (context.queues.size() != num_queues || context.kicks.size() != num_queues) {
        spdlog::error("{}: activated with {} queues and {} kick eventfds, expected {}", name_,
                      context.queues.size(), context.kicks.size(), num_queues);
        return false;
    }
    std::vector<std::shared_ptr<Worker>> workers;
    try {
        for (uint16_t i = 0; i < num_queues; ++i) {
            RequestHandler* handler = handler_for(i);
            if (!context.queues[i].ready || !handler) continue;  // drivers may use fewer queues
            auto queue = SplitQueue::create(context.memory, context.queues[i], max_queue_size,
                                            context.features);
            if (!queue) {
                spdlog::error("{}: queue {}: {}", name_, i, to_string(queue.error()));
                return false;
            }
            if (!context.kicks[i]) {
                spdlog::error("{}: queue {} has no kick eventfd", name_, i);
                return false;
            }
            const Worker::Wiring wiring{
                name_,         i, *context.kicks[i], *handler, context.interrupt, counters_,
                request_alloc_};
            workers.push_back(std::make_shared<Worker>(io_, std::move(queue).value(), wiring));
        }
    } catch (const std::exception& e) {
        spdlog::error("{}: cannot start the queues: {}", name_, e.what());
        return false;
    }
    std::vector<std::shared_ptr<const QueueRequests>> requests(num_queues);
    for (const auto& worker : workers) requests[worker->index()] = worker->requests();
    counters_.publish_queues(std::move(requests));
    workers_ = std::move(workers);
    for (auto& worker : workers_) worker->start();
    return true;
}

void QueueWorkers::stop() {
    for (auto& worker : workers_) worker->stop();
    workers_.clear();
}

}  // namespace mvmm::devices::virtio
