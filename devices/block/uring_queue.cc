// aio=io_uring for raw images: a ring per queue (io_queue.h), its completion eventfd the one the
// queue worker waits on.  A ring per queue rather than per I/O thread because Asio runs a
// queue on whichever I/O thread is free: a ring per thread would be reaped by one thread while
// its requests' queue runs on another, and need a lock on both sides; a queue's own ring is
// only ever touched by that queue's context, so submitting and reaping take no lock.
#include <liburing.h>
#include <linux/falloc.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>
#include <thread>

#include "devices/block/raw_image.h"
#include "devices/block/thread_pool.h"

namespace mvmm::devices::block {
namespace {

unsigned ring_entries(uint32_t depth) {
    unsigned entries = 1;
    while (entries < depth) entries <<= 1;
    return entries;
}

class UringQueue final : public IoQueue {
  public:
    UringQueue(RawImage& image, uint32_t depth, const EventFd* completions)
        : IoQueue(image, depth),
          raw_(image),
          own_(completions ? std::nullopt : std::make_optional<EventFd>()),
          done_(completions ? *completions : *own_),
          iovecs_(sizeof(iovec) * depth, depth),
          fallback_(image, done_) {
        if (int error = io_uring_queue_init(ring_entries(depth), &ring_, 0); error < 0)
            throw std::system_error(-error, std::generic_category(), "io_uring_queue_init");
        if (int error = io_uring_register_eventfd(&ring_, done_.get()); error < 0) {
            io_uring_queue_exit(&ring_);
            throw std::system_error(-error, std::generic_category(), "io_uring_register_eventfd");
        }
    }
    ~UringQueue() override { io_uring_queue_exit(&ring_); }
    int completion_fd() const noexcept override { return done_.get(); }

  private:
    void issue(IoRequest& request) override;
    void poll() override;
    void submit_ready();
    void ring_failed(int error);
    io_uring_sqe* next_sqe();  // nullptr once the ring failed
    void prepare_transfer(io_uring_sqe& sqe, IoRequest& request);
    void reaped(IoRequest& request, int result);

    RawImage& raw_;
    io_uring ring_{};
    std::optional<EventFd> own_;
    const EventFd& done_;
    SlotPool iovecs_;  // one step's iovecs per operation in flight
    // Write-zeroes where the filesystem cannot zero (writes zeroes), and every step once the
    // kernel stopped taking from the ring.
    Offload fallback_;
    bool ring_failed_ = false;
};

io_uring_sqe* UringQueue::next_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe) return sqe;
    submit_ready();  // full: more steps than operations in flight were issued since a poll
    if (ring_failed_) return nullptr;
    sqe = io_uring_get_sqe(&ring_);
    if (!sqe) throw std::runtime_error("io_uring submission queue full");
    return sqe;
}

void UringQueue::prepare_transfer(io_uring_sqe& sqe, IoRequest& request) {
    IoRequest::Flight& flight = request.flight;
    auto* iov = reinterpret_cast<iovec*>(flight.scratch->bytes().data());
    unsigned count = 0;
    for (const GuestBuffers::Part piece : flight.step.buffers) {
        if (count == depth_) break;  // a chain has no more pieces; a short step goes on later
        iov[count++] = piece.as_iovec();
    }
    const int fd = raw_.fd();
    if (flight.step.kind == IoOp::Kind::Read)
        io_uring_prep_readv(&sqe, fd, iov, count, flight.step.offset);
    else
        io_uring_prep_writev(&sqe, fd, iov, count, flight.step.offset);
}

void UringQueue::issue(IoRequest& request) {
    const IoStep& step = request.flight.step;
    if (step.kind == IoOp::Kind::Flush && raw_.flush_failed()) return finished(request, -EIO);
    if (ring_failed_) return fallback_.run(request);
    const bool transfer = step.kind == IoOp::Kind::Read || step.kind == IoOp::Kind::Write;
    // Whatever may throw comes before the SQE is taken: one taken is submitted, filled or not.
    if (transfer && !request.flight.scratch) request.flight.scratch = iovecs_.acquire();
    if (transfer && !request.flight.scratch)
        throw std::runtime_error("more io_uring transfers than the queue depth");
    io_uring_sqe* sqe = next_sqe();
    if (!sqe) return fallback_.run(request);  // the ring failed on the way
    const int fd = raw_.fd();
    switch (step.kind) {
        case IoOp::Kind::Read:
        case IoOp::Kind::Write:
            prepare_transfer(*sqe, request);
            break;
        case IoOp::Kind::Flush:
            io_uring_prep_fsync(sqe, fd, IORING_FSYNC_DATASYNC);
            break;
        case IoOp::Kind::Discard:
            io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                    step.offset, step.length);
            break;
        case IoOp::Kind::WriteZeroes:
            // A punched hole reads back as zeroes; without unmap, the zeroing fallocate.
            io_uring_prep_fallocate(sqe, fd,
                                    (step.may_unmap ? FALLOC_FL_PUNCH_HOLE : FALLOC_FL_ZERO_RANGE) |
                                        FALLOC_FL_KEEP_SIZE,
                                    step.offset, step.length);
            break;
    }
    io_uring_sqe_set_data(sqe, &request);
}

void UringQueue::submit_ready() {
    while (!ring_failed_ && io_uring_sq_ready(&ring_) > 0) {
        const int submitted = io_uring_submit(&ring_);
        if (submitted == -EINTR || submitted == -EAGAIN || submitted == -EBUSY) continue;
        if (submitted < 0) ring_failed(-submitted);
    }
}

// io_uring_enter failing for another reason than a busy moment means the ring itself is gone
// (EBADF, ENXIO, EOWNERDEAD...): what the kernel has not taken from it would never run, and a
// reset would wait for it for ever.  Those steps, and every later one, run on the thread pool
// instead; what the kernel took still completes on the ring.
void UringQueue::ring_failed(int error) {
    ring_failed_ = true;
    spdlog::error("{}: io_uring stopped taking requests ({}): this queue goes on with aio=threads",
                  raw_.path(), std::strerror(error));
    const unsigned tail = *ring_.sq.ktail;
    for (unsigned index = io_uring_smp_load_acquire(ring_.sq.khead); index != tail; ++index) {
        const io_uring_sqe& sqe = ring_.sq.sqes[ring_.sq.array[index & ring_.sq.ring_mask]];
        fallback_.run(*reinterpret_cast<IoRequest*>(sqe.user_data));
    }
}

void UringQueue::poll() {
    submit_ready();
    unsigned head, seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
        reaped(*static_cast<IoRequest*>(io_uring_cqe_get_data(cqe)), cqe->res);
        ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    fallback_.collect([this](IoRequest& request) { finished(request, request.flight.result); });
    submit_ready();  // what reaped() issued again
}

// One CQE, with what RawImage's blocking calls would make of the same result.
void UringQueue::reaped(IoRequest& request, int result) {
    const IoOp::Kind kind = request.flight.step.kind;
    if (result == -EINTR || result == -EAGAIN) return issue_or_fail(request);
    switch (kind) {
        case IoOp::Kind::Flush:
            return finished(request, raw_.record_flush(result));
        case IoOp::Kind::Discard:  // a hint: a host that cannot punch holes still succeeds
            return finished(request, result < 0 && fallocate_unsupported(-result) ? 0 : result);
        case IoOp::Kind::WriteZeroes:
            if (result < 0 && fallocate_unsupported(-result)) return fallback_.run(request);
            return finished(request, result);
        default:
            return finished(request, result);
    }
}

}  // namespace

bool io_uring_supported() {
    static const bool supported = [] {
        // On a thread of its own: once a ring is closed, the kernel's teardown queues task work
        // (TWA_SIGNAL) on the thread that made it, which interrupts that thread's next
        // interruptible call: on the main thread, KVM_CREATE_VM, which comes next.
        int error = 0;
        std::thread([&error] {
            io_uring ring{};
            error = io_uring_queue_init(2, &ring, 0);
            if (error == 0) io_uring_queue_exit(&ring);
        }).join();
        if (error < 0) {
            spdlog::warn("io_uring is not available here ({}): disks default to aio=threads",
                         std::strerror(-error));
            return false;
        }
        return true;
    }();
    return supported;
}

std::unique_ptr<IoQueue> RawImage::open_uring_queue(uint32_t depth, const EventFd* completions) {
    return std::make_unique<UringQueue>(*this, depth, completions);
}

}  // namespace mvmm::devices::block
