#include "devices/virtio/blk/io.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <memory>

namespace mvmm::devices::virtio::blk {

using block::IoOp;

std::optional<IoOp> operation(const Request& request, size_t index, bool write_through) {
    const bool ranged =
        request.type == RequestType::Discard || request.type == RequestType::WriteZeroes;
    const size_t own = request.type == RequestType::GetId ? 0 : ranged ? request.ranges.size() : 1;
    if (index < own && ranged) {
        const DiskRange& range = request.ranges[index];
        const bool discard = request.type == RequestType::Discard;
        return IoOp{.kind = discard ? IoOp::Kind::Discard : IoOp::Kind::WriteZeroes,
                    .may_unmap = range.unmap,
                    .offset = range.offset,
                    .length = range.length,
                    .buffers = {}};
    }
    if (index < own) {
        switch (request.type) {
            case RequestType::In:
                return IoOp{
                    .kind = IoOp::Kind::Read, .offset = request.offset, .buffers = request.data};
            case RequestType::Out:
                return IoOp{
                    .kind = IoOp::Kind::Write, .offset = request.offset, .buffers = request.data};
            default:
                return IoOp{.kind = IoOp::Kind::Flush};
        }
    }
    const bool changes_disk = request.type == RequestType::Out || ranged;
    if (index == own && changes_disk && write_through) return IoOp{.kind = IoOp::Kind::Flush};
    return std::nullopt;
}

// A request between its first operation and its status, in its slot.
struct BlkQueue::Pending final : block::IoRequest {
    Pending(BlkQueue& queue, InFlight& request, Request parsed)
        : queue(queue), request(request), parsed(std::move(parsed)) {}
    void io_done(block::IoResult result) override { queue.step_done(*this, result); }

    BlkQueue& queue;
    InFlight& request;
    const Request parsed;
    size_t done = 0;  // operations finished
};

BlkQueue::BlkQueue(const BlkDisk& disk, block::AioMode aio, uint16_t queue_size)
    : disk_(disk), io_(disk.image.open_queue(aio, queue_size)) {}

size_t BlkQueue::state_bytes(uint16_t) const {
    return sizeof(Pending);
}

void BlkQueue::start(InFlight& request) {
    DiskInfo info = disk_.info;
    info.capacity_sectors = disk_.capacity_sectors.load();  // a resize may change it
    auto parsed = parse(request.chain(), info);
    if (!parsed) {
        ++disk_.counters.bad_requests;
        spdlog::debug("virtio-blk {}: bad request: {}", disk_.image.path(), parsed.error().what);
        if (parsed.error() == blk_error::kNoStatusByte) return request.complete(0);
        return finish(request, parsed.error().status);
    }
    if (parsed->type == RequestType::GetId) {
        std::array<uint8_t, kIdBytes> padded{};
        std::copy_n(disk_.serial.begin(), std::min(disk_.serial.size(), padded.size()),
                    padded.begin());
        parsed->data.copy_from(0, padded);
        return finish(request, Status::Ok);
    }
    next(*std::construct_at(reinterpret_cast<Pending*>(request.state()), *this, request,
                            std::move(parsed).value()));
}

// Submits the next operation, or finishes the request when there is none.
void BlkQueue::next(Pending& pending) {
    if (auto op = operation(pending.parsed, pending.done, disk_.write_through))
        return io_->submit(pending, *op);
    InFlight& request = pending.request;
    std::destroy_at(&pending);
    finish(request, Status::Ok);
}

void BlkQueue::step_done(Pending& pending, const block::IoResult& result) {
    if (result) {
        ++pending.done;
        return next(pending);
    }
    const bool first = disk_.counters.io_errors.fetch_add(1) == 0;
    spdlog::log(first ? spdlog::level::warn : spdlog::level::debug, "virtio-blk {}: I/O error: {}",
                disk_.image.path(), result.error().message());
    InFlight& request = pending.request;
    std::destroy_at(&pending);
    finish(request, Status::IoError);
}

void BlkQueue::finish(InFlight& request, Status status) {
    const DescriptorChain& chain = request.chain();
    const auto byte = static_cast<uint8_t>(status);
    chain.writable.copy_from(chain.writable.size() - 1, std::span(&byte, 1));
    // As QEMU does: the status byte ends the writable part, so all of it counts as written.
    request.complete(static_cast<uint32_t>(chain.writable.size()));
}

}  // namespace mvmm::devices::virtio::blk
