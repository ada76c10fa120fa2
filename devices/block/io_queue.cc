#include "devices/block/io_queue.h"

#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <system_error>
#include <utility>

#include "devices/block/direct_io.h"

namespace mvmm::devices::block {
namespace {

// With cache=none, a transfer whose buffers the image cannot take moves through a bounce
// buffer this large at a time (Linux's own requests are aligned: this is the rare case).
constexpr uint64_t kBounceWindow = 64 * 1024;
// A merged step holds at most this many operations (QEMU's limit too) and parts (iovecs); its
// parts come from a pool with a slot for every second operation in flight, and a run that
// finds none left goes to the host an operation at a time.
constexpr size_t kMaxRunOperations = 32;
constexpr size_t kMaxRunParts = 256;

bool is_transfer(IoOp::Kind kind) {
    return kind == IoOp::Kind::Read || kind == IoOp::Kind::Write;
}

std::span<uint8_t> bounce_bytes(const IoRequest::Flight& flight, uint64_t length) {
    const auto bytes = flight.bounce->bytes();
    return {reinterpret_cast<uint8_t*>(bytes.data()), length};
}

IoResult error_result(int error) {
    return Unexpected{std::error_code(error, std::generic_category())};
}

// Runs each step at once, on the queue's context: one operation at a time.
class SyncQueue final : public IoQueue {
  public:
    SyncQueue(DiskImage& image, uint32_t depth) : IoQueue(image, depth) {}
    int completion_fd() const noexcept override { return -1; }

  private:
    void issue(IoRequest& request) override {
        finished(request, run_step(image_, request.flight.step));
    }
    void poll() override {}
};

}  // namespace

std::string_view to_string(AioMode mode) {
    switch (mode) {
        case AioMode::IoUring:
            return "io_uring";
        case AioMode::Threads:
            return "threads";
        case AioMode::Sync:
            return "sync";
    }
    return "?";
}

AioMode default_aio_mode() {
    return io_uring_supported() ? AioMode::IoUring : AioMode::Threads;
}

int64_t run_step(DiskImage& image, const IoStep& step) {
    IoResult result = Ok{};
    switch (step.kind) {
        case IoOp::Kind::Read:
            result = image.read(step.offset, step.buffers);
            break;
        case IoOp::Kind::Write:
            result = image.write(step.offset, step.buffers);
            break;
        case IoOp::Kind::Flush:
            result = image.flush();
            break;
        case IoOp::Kind::Discard:
            result = image.discard(step.offset, step.length);
            break;
        case IoOp::Kind::WriteZeroes:
            result = image.write_zeroes(step.offset, step.length, step.may_unmap);
            break;
    }
    if (!result) return -int64_t{result.error().value()};
    return is_transfer(step.kind) ? int64_t(step.length) : 0;
}

std::unique_ptr<IoQueue> open_sync_queue(DiskImage& image, uint32_t depth) {
    return std::make_unique<SyncQueue>(image, depth);
}

IoQueue::IoQueue(DiskImage& image, uint32_t depth)
    : image_(image),
      depth_(depth),
      run_parts_pool_(sizeof(GuestBuffers::Part) * std::min<size_t>(depth, kMaxRunParts),
                      std::max(depth / 2, 1u)) {
    if (image.buffer_alignment() > 1) bounce_pool_.emplace(kBounceWindow, depth);
}

void IoQueue::List::push(IoRequest& request) noexcept {
    request.flight.next = nullptr;
    if (tail)
        tail->flight.next = &request;
    else
        head = &request;
    tail = &request;
}

IoRequest* IoQueue::List::pop() noexcept {
    IoRequest* request = head;
    if (request) head = request->flight.next;
    if (!head) tail = nullptr;
    return request;
}

void IoQueue::submit(IoRequest& request, const IoOp& op) noexcept {
    IoRequest::Flight& flight = request.flight;
    flight.op = op;
    flight.moved = 0;
    flight.next = nullptr;
    if (is_transfer(op.kind) && bounce_pool_ && !aligned(op.buffers, image_.buffer_alignment())) {
        flight.bounce = bounce_pool_->acquire();
        if (!flight.bounce) return finished(request, -ENOBUFS);  // more in flight than depth
        flight.bounce_part = GuestBuffers::Part(bounce_bytes(flight, kBounceWindow));
    }
    submitted_.push(request);
}

// The step after what has moved so far; a write's bounce window is filled first.
void IoQueue::prepare_step(IoRequest& request) {
    IoRequest::Flight& flight = request.flight;
    const IoOp& op = flight.op;
    flight.step = {.kind = op.kind,
                   .may_unmap = op.may_unmap,
                   .offset = op.offset,
                   .length = op.length,
                   .buffers = {}};
    if (is_transfer(op.kind)) {
        const uint64_t rest = op.buffers.size() - flight.moved;
        flight.step.offset = op.offset + flight.moved;
        if (flight.bounce) {
            flight.step.length = std::min(rest, kBounceWindow);
            flight.step.buffers =
                GuestBuffers(std::span(&flight.bounce_part, 1)).slice(0, flight.step.length);
            if (op.kind == IoOp::Kind::Write)
                op.buffers.copy_to(flight.moved, bounce_bytes(flight, flight.step.length));
        } else {
            flight.step.length = rest;
            flight.step.buffers = op.buffers.slice(flight.moved, rest);
        }
    }
}

void IoQueue::next_step(IoRequest& request) {
    prepare_step(request);
    issue_or_fail(request);
}

// Hands what submit() took to the host, a run of transfers that continue each other as one
// step.
void IoQueue::issue_submitted() {
    while (IoRequest* request = submitted_.pop()) {
        prepare_step(*request);
        const IoRequest::Flight& flight = request->flight;
        const bool mergeable = is_transfer(flight.op.kind) && !flight.bounce;
        if (mergeable && submitted_.head) merge_run(*request);
        issue_or_fail(*request);
    }
}

// Takes the submitted operations that continue `first`'s transfer into its step.
void IoQueue::merge_run(IoRequest& first) {
    IoRequest::Flight& flight = first.flight;
    const auto continues = [&](const IoRequest::Flight& next, size_t operations, size_t parts) {
        return next.op.kind == flight.op.kind && !next.bounce &&
               next.op.offset == flight.op.offset + flight.step.length &&
               operations < kMaxRunOperations &&
               parts + next.op.buffers.piece_count() <=
                   run_parts_pool_.slot_size() / sizeof(GuestBuffers::Part);
    };
    const size_t first_parts = flight.op.buffers.piece_count();
    if (!continues(submitted_.head->flight, 1, first_parts)) return;
    flight.run_parts = run_parts_pool_.acquire();
    if (!flight.run_parts) return;
    auto* parts = reinterpret_cast<GuestBuffers::Part*>(flight.run_parts->bytes().data());
    size_t count = 0, operations = 1;
    for (const GuestBuffers::Part piece : flight.op.buffers) parts[count++] = piece;
    for (IoRequest* last = &first;
         submitted_.head && continues(submitted_.head->flight, operations, count); ++operations) {
        IoRequest& next = *submitted_.pop();
        for (const GuestBuffers::Part piece : next.flight.op.buffers) parts[count++] = piece;
        flight.step.length += next.flight.op.buffers.size();
        last->flight.run_next = &next;
        last = &next;
    }
    flight.step.buffers = GuestBuffers(std::span<const GuestBuffers::Part>(parts, count));
}

// The merged step of `first`'s run ended: each operation the host reached takes its part of
// the bytes moved; one it stopped short of, or every one when the step failed, goes on alone,
// so that an error is its own operation's, not its neighbours'.  Returns how many are done.
size_t IoQueue::split_run(IoRequest& first) {
    const int64_t result = first.flight.result;
    first.flight.run_parts.reset();
    uint64_t start = 0;
    size_t done = 0;
    for (IoRequest* request = &first; request;) {
        IoRequest& own = *request;
        request = std::exchange(own.flight.run_next, nullptr);
        const uint64_t length = own.flight.op.buffers.size();
        if (result > 0 && static_cast<uint64_t>(result) > start) {
            own.flight.result = static_cast<int64_t>(std::min(uint64_t(result) - start, length));
            done += advance(own);
        } else {
            next_step(own);
        }
        start += length;
    }
    return done;
}

void IoQueue::issue_or_fail(IoRequest& request) noexcept {
    try {
        issue(request);
    } catch (const std::exception& e) {
        spdlog::log(
            std::exchange(refusal_logged_, true) ? spdlog::level::debug : spdlog::level::warn,
            "{}: the host refused an I/O operation: {}", image_.path(), e.what());
        finished(request, -EIO);
    }
}

void IoQueue::finished(IoRequest& request, int64_t result) noexcept {
    request.flight.result = result;
    finished_.push(request);
}

size_t IoQueue::progress() {
    size_t done = 0;
    for (;;) {
        issue_submitted();
        poll();
        if (!finished_.head) return done;
        while (IoRequest* request = finished_.pop())
            done += request->flight.run_parts ? split_run(*request) : advance(*request);
    }
}

bool IoQueue::advance(IoRequest& request) {
    IoRequest::Flight& flight = request.flight;
    const int64_t result = flight.result;
    if (result < 0) {
        complete(request, error_result(static_cast<int>(-result)));
        return true;
    }
    if (!is_transfer(flight.op.kind)) {
        complete(request, Ok{});
        return true;
    }
    if (result == 0) {  // the image shrank under us
        complete(request, error_result(EIO));
        return true;
    }
    const auto moved = static_cast<uint64_t>(result);
    if (flight.bounce && flight.op.kind == IoOp::Kind::Read)
        flight.op.buffers.copy_from(flight.moved, bounce_bytes(flight, moved));
    flight.moved += moved;
    if (flight.moved < flight.op.buffers.size()) {
        next_step(request);
        return false;
    }
    complete(request, Ok{});
    return true;
}

void IoQueue::complete(IoRequest& request, IoResult result) {
    request.flight.bounce.reset();
    request.flight.scratch.reset();
    request.io_done(std::move(result));
}

}  // namespace mvmm::devices::block
