#include "devices/virtio/queue_worker.h"

#include "devices/virtio/handler_memory.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

namespace mvmm::devices::virtio {
namespace {

// A request's slot: the InFlight, the handler's state, then room for one part per descriptor
// the queue holds.  Only what a request uses is ever written.
using Part = GuestBuffers::Part;
constexpr size_t kStateAlignment = alignof(std::max_align_t);

constexpr size_t round_up(size_t bytes, size_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}
constexpr size_t kInFlightBytes = round_up(sizeof(InFlight), kStateAlignment);
static_assert(alignof(InFlight) <= kStateAlignment && alignof(Part) <= kStateAlignment);

// A round starts at most this many requests, then completes what finished and notifies, so the
// driver hears of the first completions while the rest wait and refills the ring meanwhile.
// Handed the whole ring in one round (io_uring runs page-cache reads inside the submission), a
// guest at depth 32 had its interrupt only after all 32 and then left the host idle while it
// refilled: in the test host 4K random reads went 1.6x as fast with rounds of 8.
constexpr uint32_t kStartsPerRound = 8;

struct SlotLayout {
    size_t state_bytes;  // rounded up
    uint16_t parts;

    size_t size() const { return kInFlightBytes + state_bytes + parts * sizeof(Part); }
    std::byte* state(const SlotPool::Slot& slot) const {
        return slot.bytes().data() + kInFlightBytes;
    }
    std::span<Part> parts_in(const SlotPool::Slot& slot) const {
        auto* first = slot.bytes().data() + kInFlightBytes + state_bytes;
        return {reinterpret_cast<Part*>(first), parts};
    }
};

}  // namespace

// One queue's life between start() and stop(): wait for a kick or a completion on the
// io_context, complete what finished, start what the ring holds, notify.  Both eventfds are in
// one epoll set, so a worker has one Asio handler queued at a time (a resume or the wait, each
// queueing the next) and mutex_ keeps one queue on one thread at a time: it is contended by
// stop(), and by the next handler, which may start on another I/O thread while the one that
// queued it is still returning.  Handlers hold a shared_ptr, so the worker outlives a handler still
// queued after stop(); such a handler sees stopped_ and touches nothing else.
class QueueWorkers::Worker final : public std::enable_shared_from_this<Worker>,
                                   private InFlight::Owner {
  public:
    struct Wiring {
        const std::string& name;
        uint16_t index;
        const EventFd& kick;
        AsyncRequestHandler& handler;
        Interrupt& interrupt;
        QueueCounters& counters;
        SlotSource request_alloc;
    };
    Worker(boost::asio::io_context& io, SplitQueue queue, const Wiring& wiring);

    void start();
    uint16_t index() const noexcept { return index_; }
    // Its request pool and heap allocations, for the counters' statistics.
    std::shared_ptr<const QueueRequests> requests() const { return requests_; }
    // Completes every request in flight; after it returns no handler touches the queue, the
    // request handler or the interrupt.
    void stop();

  private:
    enum class Taken { Idle, Full, More };

    template <class Function>
    InMemory<Function> in_memory(Function function) {
        return {std::move(function), HandlerAllocator<void>(handler_memory_)};
    }
    void post_resume();
    void resume();
    void on_wake(const boost::system::error_code& error);
    void consume_wakes();
    void serve(CountedAllocations& counted);  // requires mutex_, !stopped_
    Result<Taken, RingError> take_and_start();
    void wait();
    void complete(InFlight& request, uint32_t written) override;  // requires mutex_
    void free_slot(InFlight& request);  // requires mutex_; the used ring untouched
    void complete_in_flight();          // requires mutex_
    void fail(std::string_view why);    // requires mutex_

    const std::string& name_;  // the QueueWorkers' name, which outlives every worker
    const uint16_t index_;
    SplitQueue queue_;
    AsyncRequestHandler& handler_;
    Interrupt& interrupt_;
    QueueCounters& counters_;
    const SlotLayout layout_;
    // Its pool has a slot per request in flight, the queue size of them.
    const std::shared_ptr<QueueRequests> requests_;
    boost::asio::io_context& io_;
    HandlerMemory handler_memory_;                 // for the one handler queued at a time
    Fd kick_;                                      // a dup of the transport's eventfd
    const int completion_fd_;                      // the handler's, or -1
    boost::asio::posix::stream_descriptor wakes_;  // epoll on kick_ and completion_fd_
    std::mutex mutex_;  // held while the queue is served; stop() takes it to wait for that
    bool stopped_ = false;
    std::atomic<bool> stopping_{false};      // set by stop() first: the batch takes no more chains
    uint32_t in_flight_ = 0;                 // started, not completed; by mutex_
    CountedAllocations* counted_ = nullptr;  // while an I/O thread serves the queue
};

void RequestHandler::start(InFlight& request) {
    request.complete(handle(request.chain()));
}

void InFlight::complete(uint32_t written) {
    owner_.complete(*this, written);
}

namespace {

Fd watch_in_epoll(int kick, int completions) {
    Fd epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll.valid()) throw_errno("epoll_create1 for a queue");
    for (const int fd : {kick, completions}) {
        if (fd < 0) continue;
        epoll_event event{.events = EPOLLIN, .data = {.fd = fd}};
        check_syscall(::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, fd, &event), "epoll_ctl of a queue");
    }
    return epoll;
}

}  // namespace

QueueWorkers::Worker::Worker(boost::asio::io_context& io, SplitQueue queue, const Wiring& wiring)
    : name_(wiring.name),
      index_(wiring.index),
      queue_(std::move(queue)),
      handler_(wiring.handler),
      interrupt_(wiring.interrupt),
      counters_(wiring.counters),
      layout_{round_up(wiring.handler.state_bytes(queue_.size()), kStateAlignment), queue_.size()},
      requests_(
          std::make_shared<QueueRequests>(layout_.size(), queue_.size(), wiring.request_alloc)),
      io_(io),
      kick_(static_cast<int>(check_syscall(::fcntl(wiring.kick.get(), F_DUPFD_CLOEXEC, 0),
                                           "dup of a queue kick eventfd"))),
      completion_fd_(wiring.handler.completion_fd()),
      wakes_(io) {
    Fd epoll = watch_in_epoll(kick_.get(), completion_fd_);
    boost::system::error_code error;
    wakes_.assign(epoll.get(), error);
    if (error) throw boost::system::system_error(error, "watching a queue's eventfds");
    [[maybe_unused]] const int taken = epoll.release();  // the descriptor owns it now
}

void QueueWorkers::Worker::start() {
    // Serve once first: a driver may have queued buffers before DRIVER_OK.
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
    wakes_.close(ignored);  // the pending wait completes with operation_aborted
    complete_in_flight();
}

// On stop()'s thread: waits for the handler's completions until nothing is in flight.  A
// progress() first: a batch stopped by a ring error has not handed the requests it started to
// the host (operations an IoQueue took but has not issued), and nothing would signal their
// completion.  A handler without a completion fd must complete some at each progress().
void QueueWorkers::Worker::complete_in_flight() {
    try {
        while (in_flight_ > 0) {
            const uint32_t before = in_flight_;
            handler_.progress();
            if (in_flight_ == 0) return;
            if (completion_fd_ < 0 && in_flight_ == before)
                throw std::logic_error("a handler without a completion fd kept a request");
            if (completion_fd_ < 0) continue;  // it completed some: it may complete the rest
            pollfd ready{.fd = completion_fd_, .events = POLLIN, .revents = 0};
            if (::poll(&ready, 1, -1) < 0 && errno != EINTR) throw_errno("poll");
            uint64_t count;
            [[maybe_unused]] auto n = ::read(completion_fd_, &count, sizeof count);
        }
    } catch (const std::exception& e) {
        // The requests' memory may still be in the host's hands: better to stop here.
        spdlog::critical("{}: queue {}: cannot complete the requests in flight: {}", name_, index_,
                         e.what());
        std::terminate();
    }
}

// The allocations are counted before the lock goes: the next serve, on another I/O thread, may
// complete the requests this one started, and the driver must not see them done uncounted.
void QueueWorkers::Worker::resume() {
    std::lock_guard lock(mutex_);
    CountedAllocations counted(*requests_);
    if (!stopped_) serve(counted);
}

void QueueWorkers::Worker::on_wake(const boost::system::error_code& error) {
    std::lock_guard lock(mutex_);
    CountedAllocations counted(*requests_);
    if (stopped_) return;
    if (error) return fail("waiting for kicks failed: " + error.message());
    consume_wakes();
    serve(counted);
}

// Reads what woke the worker, so that a kick or a completion after this wakes it again.
void QueueWorkers::Worker::consume_wakes() {
    std::array<epoll_event, 2> events;
    const int n = ::epoll_wait(wakes_.native_handle(), events.data(), events.size(), 0);
    for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == kick_.get()) counters_.record_notify();
        uint64_t count;
        [[maybe_unused]] auto read = ::read(fd, &count, sizeof count);
    }
}

// Completes what finished, starts what the ring holds as far as slots last, and waits for the
// next kick or completion.  The driver hears of the completions before the next batch starts:
// handing that batch to the host may run it there and then (io_uring reads from the page cache
// complete inside the submission), which would hold the interrupt back for as long.
void QueueWorkers::Worker::serve(CountedAllocations& counted) {
    counted_ = &counted;
    try {
        handler_.progress();
        if (queue_.should_notify()) interrupt_.notify_queue(index_);
        auto taken = take_and_start();
        if (taken) handler_.progress();  // hands the new requests to the host
        counted_ = nullptr;
        if (!taken) return fail(to_string(taken.error()));
        if (queue_.should_notify()) interrupt_.notify_queue(index_);
        if (stopping_.load()) return;
        if (*taken == Taken::More)
            post_resume();
        else
            wait();
    } catch (const std::exception& e) {
        // Out of memory or descriptors: a queue that silently stopped would hang the guest.
        counted_ = nullptr;
        fail(std::string("stopped by a host error: ") + e.what());
    }
}

// Pops chains into slots and starts them until the ring is empty (Idle: kicks wanted again),
// every slot is in flight (Full: the rest wait in the ring, kicks stay off, and a completion
// wakes the worker) or a round's worth was started (More: the worker completes, notifies and
// yields, so one busy queue cannot starve the others on its I/O thread).  A slot is taken only
// for a chain the ring holds, so the pool's peak is the most requests in flight.
Result<QueueWorkers::Worker::Taken, RingError> QueueWorkers::Worker::take_and_start() {
    queue_.disable_notifications();
    for (uint32_t budget = std::min<uint32_t>(queue_.size(), kStartsPerRound);
         budget > 0 && !stopping_.load();) {
        if (!queue_.has_available()) {
            if (!queue_.enable_notifications()) return Taken::Idle;
            queue_.disable_notifications();
            continue;
        }
        auto slot = requests_->pool.acquire();
        if (!slot) return Taken::Full;
        auto popped = queue_.pop(layout_.parts_in(*slot));
        if (!popped) return Unexpected{popped.error()};
        if (!*popped) return Taken::Idle;
        std::byte* const state = layout_.state(*slot);
        auto* request = std::construct_at(reinterpret_cast<InFlight*>(slot->bytes().data()),
                                          static_cast<InFlight::Owner&>(*this), **popped,
                                          std::move(*slot), state);
        ++in_flight_;
        --budget;
        try {
            handler_.start(*request);
        } catch (...) {
            free_slot(*request);  // not started: the queue stops with it still in the ring's hands
            throw;
        }
    }
    return stopping_.load() ? Taken::Idle : Taken::More;
}

void QueueWorkers::Worker::complete(InFlight& request, uint32_t written) {
    // What the driver sees returned is counted first.
    if (counted_) counted_->update();
    ++counters_.requests;
    counters_.record_used(index_);
    queue_.push_used(request.chain().head, written);
    free_slot(request);
}

void QueueWorkers::Worker::free_slot(InFlight& request) {
    const SlotPool::Slot slot = request.take_slot();  // released when this returns
    std::destroy_at(&request);
    --in_flight_;
}

void QueueWorkers::Worker::wait() {
    wakes_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                      in_memory([self = shared_from_this()](const boost::system::error_code& e) {
                          self->on_wake(e);
                      }));
}

void QueueWorkers::Worker::fail(std::string_view why) {
    stopped_ = true;
    boost::system::error_code ignored;
    wakes_.close(ignored);
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
            AsyncRequestHandler* handler = handler_for(i);
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
