#include "devices/virtio/scsi/lun.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <bit>
#include <stdexcept>
#include <utility>

namespace mvmm::devices::virtio::scsi {
namespace {

Sense write_sense(const std::error_code& error) {
    return error == std::errc::no_space_on_device ? sense::kSpaceAllocationFailed
                                                  : sense::kWriteError;
}

BlockSizes sizes_of(const LunConfig& config) {
    return checked_block_sizes(config.logical_block_size, config.physical_block_size);
}

}  // namespace

Lun::Lun(const LunConfig& config)
    : Lun(config, block::open_disk_image(config.path, config.read_only, config.image)) {}

Lun::Lun(const LunConfig& config, std::unique_ptr<block::DiskImage> image)
    : open_(std::make_shared<const bool>(true)),
      image_(std::move(image)),
      sizes_(sizes_of(config)),
      read_only_(config.read_only),
      blocks_(image_->size() / sizes_.logical),
      identity_{config.serial, naa_designator(config.serial)},
      aio_(block::checked_aio_mode(config.aio, config.path)) {
    check_image_fits(config.path, image_->size(), sizes_);
    // vmm checks it (--disk serial=); the VPD answers have room for no more.
    if (config.serial.size() > kMaxSerialBytes)
        throw std::invalid_argument("LUN serial longer than " + std::to_string(kMaxSerialBytes) +
                                    " bytes");
}

Lun::~Lun() {
    if (!closer_) return;  // the members go in reverse order: the image, then `open_`
    for (auto& io : io_queues_) io.reset();  // before the image they work on
    closer_->close(std::shared_ptr<const block::DiskImage>(std::move(image_)));
    closer_->close(std::move(open_));
}

LunInfo Lun::info() const noexcept {
    return {.blocks = blocks_.load(),
            .read_only = read_only_,
            .block_size = sizes_.logical,
            .physical_exponent = sizes_.physical_exponent(),
            .write_cache = write_cache_.load()};
}

Outcome Lun::failed(std::string_view what, const std::error_code& error, const Sense& sense) {
    spdlog::log(io_error_logged_.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                "virtio-scsi {}: {} failed: {}", image_->path(), what, error.message());
    return Outcome::check(sense);
}

Outcome Lun::written(uint64_t transferred) {
    if (!write_cache_.load()) {
        if (auto flushed = image_->flush(); !flushed)
            return failed("flush", flushed.error(), sense::kWriteError);
    }
    return Outcome::good(transferred);
}

block::IoQueue& Lun::io_queue(uint16_t queue, uint32_t depth, const EventFd& completions) {
    auto& io = io_queues_.at(queue);
    if (!io) io = image_->open_queue(aio_, depth, &completions);
    return *io;
}

std::optional<block::IoOp> Lun::io_operation(const Command& command, bool write_cache,
                                             const GuestBuffers& data_out,
                                             const GuestBuffers& data_in, size_t index) const {
    using Kind = block::IoOp::Kind;
    std::array<block::IoOp, 2> operations;
    size_t count = 0;
    if (const auto* read = std::get_if<Read>(&command.operation); read && read->blocks)
        operations[count++] = {.kind = Kind::Read,
                               .offset = read->lba * sizes_.logical,
                               .buffers = data_in.slice(0, command.transfer_bytes)};
    if (const auto* write = std::get_if<Write>(&command.operation)) {
        if (write->blocks)
            operations[count++] = {.kind = Kind::Write,
                                   .offset = write->lba * sizes_.logical,
                                   .buffers = data_out.slice(0, command.transfer_bytes)};
        // Stable before it completes, as virtio-blk's write-through.
        if (write->fua || !write_cache) operations[count++] = {.kind = Kind::Flush};
    }
    if (std::holds_alternative<SynchronizeCache>(command.operation))
        operations[count++] = {.kind = Kind::Flush};
    if (index >= count) return std::nullopt;
    return operations[index];
}

Outcome Lun::io_failed(block::IoOp::Kind kind, const std::error_code& error) {
    switch (kind) {
        case block::IoOp::Kind::Read:
            return failed("read", error, sense::kReadError);
        case block::IoOp::Kind::Write:
            return failed("write", error, write_sense(error));
        default:
            return failed("flush", error, sense::kWriteError);
    }
}

Outcome Lun::synchronize_cache() {
    if (auto flushed = image_->flush(); !flushed)
        return failed("flush", flushed.error(), sense::kWriteError);
    return Outcome::good();
}

Outcome Lun::unmap(const GuestBuffers& parameter_list) {
    auto ranges = parse_unmap_list(parameter_list, info());
    if (!ranges) return Outcome::check(ranges.error());
    for (const BlockRange& range : *ranges) {
        auto done =
            image_->discard(range.lba * sizes_.logical, uint64_t{range.blocks} * sizes_.logical);
        if (!done) return failed("unmap", done.error(), sense::kWriteError);
    }
    return Outcome::good(parameter_list.size());
}

Outcome Lun::write_same(const WriteSame& command, const GuestBuffers& data_out) {
    // Aligned as cache=none's O_DIRECT needs the pattern's every copy.
    alignas(kMaxBlockSize) std::array<uint8_t, kMaxBlockSize> storage{};
    const auto block = std::span(storage).first(sizes_.logical);
    if (!command.no_data_out) data_out.copy_to(0, block);
    const uint64_t offset = command.lba * sizes_.logical;
    const uint64_t bytes = uint64_t{command.blocks} * sizes_.logical;
    const uint64_t sent = command.no_data_out ? 0 : block.size();
    if (std::ranges::all_of(block, [](uint8_t b) { return b == 0; })) {
        auto done = image_->write_zeroes(offset, bytes, command.unmap);
        if (!done) return failed("write same", done.error(), write_sense(done.error()));
        return written(sent);
    }
    // Another pattern: the host's copy of the block, in every piece of each vectored write.
    auto done = image_->write_repeated(offset, bytes, GuestBuffers::Part(block));
    if (!done) return failed("write same", done.error(), write_sense(done.error()));
    return written(sent);
}

Outcome Lun::verify(const Verify& command, const GuestBuffers& data_out) {
    // BYTCHK 0: an image has no medium to check beyond what a read would report.
    if (!command.compare) return Outcome::good();
    const uint64_t offset = command.lba * sizes_.logical;
    const uint64_t bytes = uint64_t{command.blocks} * sizes_.logical;
    alignas(kMaxBlockSize) std::array<uint8_t, kMaxBlockSize> medium;  // read with O_DIRECT too
    std::array<uint8_t, kMaxBlockSize> sent;
    for (uint64_t done = 0; done < bytes;) {
        const size_t n = std::min<uint64_t>(medium.size(), bytes - done);
        const auto part = GuestBuffers::Part(std::span(medium).first(n));
        auto read = image_->read(offset + done, GuestBuffers(std::span(&part, 1)));
        if (!read) return failed("verify", read.error(), sense::kReadError);
        data_out.copy_to(done, std::span(sent).first(n));
        if (!std::ranges::equal(std::span(medium).first(n), std::span(sent).first(n)))
            return Outcome::check(sense::kMiscompareDuringVerify);
        done += n;
    }
    return Outcome::good(bytes);
}

Outcome Lun::mode_select(const ModeSelect& command, const GuestBuffers& parameter_list) {
    if (parameter_list.empty()) return Outcome::good();  // nothing to change
    auto changes = parse_mode_parameters(parameter_list, command.ten, info());
    if (!changes) return Outcome::check(changes.error());
    if (changes->write_cache) {
        // Turning the cache off: what it held is made stable first.
        if (!*changes->write_cache && write_cache_.load()) {
            if (auto outcome = synchronize_cache(); outcome.sense) return outcome;
        }
        write_cache_.store(*changes->write_cache);
    }
    return Outcome::good(parameter_list.size());
}

std::optional<Sense> Lun::take_unit_attention() {
    uint8_t pending = attention_.load();
    while (pending != 0) {
        const auto first = static_cast<uint8_t>(pending & -pending);  // the lowest bit
        if (attention_.compare_exchange_weak(pending, pending & ~first)) {
            if (first == kPowerOnOrReset) return sense::kPowerOnOrReset;
            return first == kCapacityChanged ? sense::kCapacityDataChanged
                                             : sense::kReportedLunsDataChanged;
        }
    }
    return std::nullopt;
}

void Lun::reset() {
    write_cache_.store(true);
    // A reset reports itself; what was pending before it is superseded (SAM-5, 6.2).
    attention_.store(kPowerOnOrReset);
}

uint64_t Lun::reread_capacity() {
    const uint64_t bytes = image_->reread_size(sizes_.logical);
    if (blocks_.exchange(bytes / sizes_.logical) != bytes / sizes_.logical)
        attention_.fetch_or(kCapacityChanged);
    return bytes;
}

}  // namespace mvmm::devices::virtio::scsi
