#include "devices/virtio/scsi/lun.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

namespace mvmm::devices::virtio::scsi {
namespace {

Sense write_sense(const std::error_code& error) {
    return error == std::errc::no_space_on_device ? sense::kSpaceAllocationFailed
                                                  : sense::kWriteError;
}

}  // namespace

Lun::Lun(const LunConfig& config)
    : image_(DiskImage::open(config.path, config.read_only)),
      info_{.blocks = image_.size() / kBlockSize, .read_only = config.read_only},
      identity_{config.serial, naa_designator(config.serial)} {
    if (info_.blocks == 0)
        throw std::runtime_error("disk image " + config.path +
                                 ": is empty; a LUN needs at least one 512-byte block");
}

Outcome Lun::failed(std::string_view what, const std::error_code& error, const Sense& sense) {
    spdlog::log(io_error_logged_.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                "virtio-scsi {}: {} failed: {}", image_.path(), what, error.message());
    return Outcome::check(sense);
}

Outcome Lun::read(const Read& command, const GuestBuffers& data_in) {
    const uint64_t bytes = uint64_t{command.blocks} * kBlockSize;
    auto done = image_.read(command.lba * kBlockSize, data_in.slice(0, bytes));
    if (!done) return failed("read", done.error(), sense::kReadError);
    return Outcome::good(bytes);
}

Outcome Lun::write(const Write& command, const GuestBuffers& data_out) {
    const uint64_t bytes = uint64_t{command.blocks} * kBlockSize;
    auto done = image_.write(command.lba * kBlockSize, data_out.slice(0, bytes));
    if (!done) return failed("write", done.error(), write_sense(done.error()));
    if (command.fua) {
        if (auto flushed = image_.flush(); !flushed)
            return failed("flush", flushed.error(), sense::kWriteError);
    }
    return Outcome::good(bytes);
}

Outcome Lun::synchronize_cache() {
    if (auto flushed = image_.flush(); !flushed)
        return failed("flush", flushed.error(), sense::kWriteError);
    return Outcome::good();
}

Outcome Lun::unmap(const GuestBuffers& parameter_list) {
    std::vector<uint8_t> list(parameter_list.size());  // at most 64 KiB, parsed as a copy
    parameter_list.copy_to(0, list);
    auto ranges = parse_unmap_list(list, info_);
    if (!ranges) return Outcome::check(ranges.error());
    for (const BlockRange& range : *ranges) {
        auto done = image_.discard(range.lba * kBlockSize, uint64_t{range.blocks} * kBlockSize);
        if (!done) return failed("unmap", done.error(), sense::kWriteError);
    }
    return Outcome::good(list.size());
}

Outcome Lun::write_same(const WriteSame& command, const GuestBuffers& data_out) {
    std::array<uint8_t, kBlockSize> block{};
    if (!command.no_data_out) data_out.copy_to(0, block);
    const uint64_t offset = command.lba * kBlockSize;
    const uint64_t bytes = uint64_t{command.blocks} * kBlockSize;
    if (std::ranges::all_of(block, [](uint8_t b) { return b == 0; })) {
        auto done = image_.write_zeroes(offset, bytes, command.unmap);
        if (!done) return failed("write same", done.error(), write_sense(done.error()));
        return Outcome::good(command.no_data_out ? 0 : kBlockSize);
    }
    // Another pattern: written 1024 blocks at a time, the same host block in every part of
    // one vectored write (nothing is copied).
    constexpr uint32_t kChunk = 1024;
    const std::vector<GuestBuffers::Part> repeated(kChunk, GuestBuffers::Part(block));
    for (uint32_t done_blocks = 0; done_blocks < command.blocks; done_blocks += kChunk) {
        const uint32_t blocks = std::min(kChunk, command.blocks - done_blocks);
        auto done = image_.write(offset + uint64_t{done_blocks} * kBlockSize,
                                 GuestBuffers(std::span(repeated).first(blocks)));
        if (!done) return failed("write same", done.error(), write_sense(done.error()));
    }
    return Outcome::good(kBlockSize);
}

}  // namespace mvmm::devices::virtio::scsi
