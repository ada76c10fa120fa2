#include "devices/virtio/scsi/lun.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <stdexcept>

namespace mvmm::devices::virtio::scsi {
namespace {

Sense write_sense(const std::error_code& error) {
    return error == std::errc::no_space_on_device ? sense::kSpaceAllocationFailed
                                                  : sense::kWriteError;
}

}  // namespace

Lun::Lun(const LunConfig& config)
    : image_(block::open_disk_image(config.path, config.read_only, config.image)),
      info_{.blocks = image_->size() / kBlockSize, .read_only = config.read_only},
      identity_{config.serial, naa_designator(config.serial)} {
    if (info_.blocks == 0)
        throw std::runtime_error("disk image " + config.path +
                                 ": is empty; a LUN needs at least one 512-byte block");
    // vmm checks it (--disk serial=); the VPD answers have room for no more.
    if (config.serial.size() > kMaxSerialBytes)
        throw std::invalid_argument("LUN serial longer than " + std::to_string(kMaxSerialBytes) +
                                    " bytes");
}

Outcome Lun::failed(std::string_view what, const std::error_code& error, const Sense& sense) {
    spdlog::log(io_error_logged_.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                "virtio-scsi {}: {} failed: {}", image_->path(), what, error.message());
    return Outcome::check(sense);
}

Outcome Lun::read(const Read& command, const GuestBuffers& data_in) {
    const uint64_t bytes = uint64_t{command.blocks} * kBlockSize;
    auto done = image_->read(command.lba * kBlockSize, data_in.slice(0, bytes));
    if (!done) return failed("read", done.error(), sense::kReadError);
    return Outcome::good(bytes);
}

Outcome Lun::write(const Write& command, const GuestBuffers& data_out) {
    const uint64_t bytes = uint64_t{command.blocks} * kBlockSize;
    auto done = image_->write(command.lba * kBlockSize, data_out.slice(0, bytes));
    if (!done) return failed("write", done.error(), write_sense(done.error()));
    if (command.fua) {
        if (auto flushed = image_->flush(); !flushed)
            return failed("flush", flushed.error(), sense::kWriteError);
    }
    return Outcome::good(bytes);
}

Outcome Lun::synchronize_cache() {
    if (auto flushed = image_->flush(); !flushed)
        return failed("flush", flushed.error(), sense::kWriteError);
    return Outcome::good();
}

Outcome Lun::unmap(const GuestBuffers& parameter_list) {
    auto ranges = parse_unmap_list(parameter_list, info_);
    if (!ranges) return Outcome::check(ranges.error());
    for (const BlockRange& range : *ranges) {
        auto done = image_->discard(range.lba * kBlockSize, uint64_t{range.blocks} * kBlockSize);
        if (!done) return failed("unmap", done.error(), sense::kWriteError);
    }
    return Outcome::good(parameter_list.size());
}

Outcome Lun::write_same(const WriteSame& command, const GuestBuffers& data_out) {
    std::array<uint8_t, kBlockSize> block{};
    if (!command.no_data_out) data_out.copy_to(0, block);
    const uint64_t offset = command.lba * kBlockSize;
    const uint64_t bytes = uint64_t{command.blocks} * kBlockSize;
    if (std::ranges::all_of(block, [](uint8_t b) { return b == 0; })) {
        auto done = image_->write_zeroes(offset, bytes, command.unmap);
        if (!done) return failed("write same", done.error(), write_sense(done.error()));
        return Outcome::good(command.no_data_out ? 0 : kBlockSize);
    }
    // Another pattern: the host's copy of the block, in every piece of each vectored write.
    auto done = image_->write_repeated(offset, bytes, GuestBuffers::Part(block));
    if (!done) return failed("write same", done.error(), write_sense(done.error()));
    return Outcome::good(kBlockSize);
}

}  // namespace mvmm::devices::virtio::scsi
