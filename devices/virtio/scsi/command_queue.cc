#include "devices/virtio/scsi/command_queue.h"

#include <linux/virtio_scsi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <system_error>

namespace mvmm::devices::virtio::scsi {
namespace {

// The part of the buffers the command did not move.
uint32_t residual(const CommandRequest& request, uint64_t transferred) {
    const uint64_t size =
        request.data_in.empty() ? request.data_out.size() : request.data_in.size();
    return static_cast<uint32_t>(size - std::min(size, transferred));  // chains are < 4 GiB
}

}  // namespace

// A command from its start to its used entry, in its slot.
struct CommandQueue::Pending final : Task, block::IoRequest {
    Pending(CommandQueue& queue, InFlight& request) : queue(queue), request(request) {}
    void io_done(block::IoResult result) override { queue.step_done(*this, result); }

    CommandQueue& queue;
    InFlight& request;
    CommandRequest framed;
    std::shared_ptr<const Targets> targets;  // held until the response is written
    std::optional<CheckedCommand> checked;
    block::IoQueue* io = nullptr;  // while its image operations run
    size_t done = 0;               // image operations finished
};

CommandQueue::CommandQueue(uint16_t queue, uint16_t depth, const TargetTable& targets,
                           TaskSet& tasks, ScsiCounters& counters)
    : queue_(queue), depth_(depth), targets_(targets), tasks_(tasks), counters_(counters) {
    busy_.reserve(depth);
}

void CommandQueue::activate(const Layout& layout) {
    layout_ = layout;
    order_.restart();
    // The LUNs present open their IoQueue of this queue now, off the I/O threads (a LUN added
    // later does on its first command here).
    for (const auto& target : *targets_.load()) {
        if (!target) continue;
        for (const uint16_t lun : target->lun_numbers())
            target->find(lun)->io_queue(queue_, depth_, completions_);
    }
}

size_t CommandQueue::state_bytes(uint16_t) const {
    return sizeof(Pending);
}

void CommandQueue::start(InFlight& request) {
    auto& pending = *std::construct_at(reinterpret_cast<Pending*>(request.state()), *this, request);
    order_.begin(pending);
    tasks_.started(queue_, pending.position);
    auto framed = parse_command(request.chain(), layout_);
    if (!framed) {
        ++counters_.bad_requests;
        spdlog::debug("virtio-scsi: bad request: {}", to_string(framed.error()));
        return finish(pending, write_failure(request.chain()));
    }
    pending.framed = std::move(framed).value();
    try {
        run(pending);
    } catch (...) {
        // Not started after all (the worker stops the queue): its slot goes, so its task too.
        order_.end(pending);
        std::destroy_at(&pending);
        throw;
    }
}

// Addresses, admits and checks the framed command, then runs it or starts its operations.
void CommandQueue::run(Pending& pending) {
    const CommandRequest& request = pending.framed;
    const auto address = lun_address(request.lun);
    // Held until the response is written: a LUN removed meanwhile stays open until then.
    pending.targets = targets_.load();
    const Target* target = address ? find_target(*pending.targets, address->target) : nullptr;
    if (!target) {
        ++counters_.bad_targets;
        return respond(pending, {.response = VIRTIO_SCSI_S_BAD_TARGET, .sense = {}, .residual = 0},
                       0);
    }
    pending.addressed = true;
    pending.target = address->target;
    pending.lun = address->lun;
    pending.tag = request.tag;
    if (const auto action = tasks_.admit(queue_, pending); action != TaskAction::Run) {
        ++counters_.aborted;
        const auto code = action == TaskAction::Reset ? VIRTIO_SCSI_S_RESET : VIRTIO_SCSI_S_ABORTED;
        return respond(
            pending, {.response = uint8_t(code), .sense = {}, .residual = residual(request, 0)}, 0);
    }
    auto checked = target->check(address->lun, request.cdb(), request.data_out, request.data_in);
    if (const auto* ready = std::get_if<TargetOutcome>(&checked)) return answer(pending, *ready);
    pending.checked = std::get<CheckedCommand>(std::move(checked));
    if (auto ran = target->run(*pending.checked, request.data_out, request.data_in))
        return answer(pending, {Delivery::Done, *ran});
    // READ, WRITE or SYNCHRONIZE CACHE, of a LUN with a disk: its image operations.
    Lun& lun = *pending.checked->lun;
    try {
        pending.io = &lun.io_queue(queue_, depth_, completions_);
    } catch (const std::system_error& e) {  // no ring or thread to be had: as an I/O error
        return answer(pending, {Delivery::Done, lun.io_failed(block::IoOp::Kind::Read, e.code())});
    }
    next(pending);
}

// Submits the command's next image operation, or answers GOOD when there is none.
void CommandQueue::next(Pending& pending) {
    const CheckedCommand& checked = *pending.checked;
    const CommandRequest& request = pending.framed;
    if (auto op = checked.lun->io_operation(checked.command, checked.info.write_cache,
                                            request.data_out, request.data_in, pending.done))
        return pending.io->submit(pending, *op);
    pending.io = nullptr;
    answer(pending, {Delivery::Done, Outcome::good(checked.command.transfer_bytes)});
}

void CommandQueue::step_done(Pending& pending, const block::IoResult& result) {
    if (result) {
        ++pending.done;
        return next(pending);
    }
    pending.io = nullptr;
    const Outcome failed = pending.checked->lun->io_failed(pending.flight.op.kind, result.error());
    answer(pending, {Delivery::Done, failed});
}

void CommandQueue::answer(Pending& pending, const TargetOutcome& result) {
    const CommandRequest& request = pending.framed;
    if (result.delivery == Delivery::Overrun) {
        ++counters_.overruns;
        return respond(
            pending,
            {.response = VIRTIO_SCSI_S_OVERRUN, .sense = {}, .residual = residual(request, 0)}, 0);
    }
    const Outcome& outcome = result.outcome;
    if (outcome.sense) ++counters_.check_conditions;
    respond(pending,
            {.response = VIRTIO_SCSI_S_OK,
             .sense = outcome.sense,
             .residual = residual(request, outcome.transferred)},
            request.data_in.empty() ? 0 : outcome.transferred);
}

void CommandQueue::respond(Pending& pending, const CommandResponse& response,
                           uint64_t data_in_written) {
    finish(pending, write_response(pending.framed, layout_, response, data_in_written));
}

// The command leaves the task set: its snapshot goes, its used entry goes into the ring, and
// a TMF waiting for it learns so.
void CommandQueue::finish(Pending& pending, uint32_t written) {
    InFlight& request = pending.request;
    const uint64_t done_below = order_.end(pending);
    const Task task = pending;
    std::destroy_at(&pending);
    request.complete(written);
    tasks_.completed(queue_, task, done_below);
}

void CommandQueue::progress() {
    // The last command of a removed LUN drops its snapshot, and the LUN's IoQueues with it:
    // each IoQueue is held here until its progress() has returned.
    for (const Task* task = order_.oldest(); task; task = task->newer) {
        const auto& pending = static_cast<const Pending&>(*task);
        if (pending.io &&
            std::ranges::none_of(busy_, [&](const auto& b) { return b.first == pending.io; }))
            busy_.emplace_back(pending.io, pending.targets);
    }
    for (const auto& [io, held] : busy_) io->progress();
    busy_.clear();
}

}  // namespace mvmm::devices::virtio::scsi
