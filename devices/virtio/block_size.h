// Logical and physical block sizes of a disk (virtio-blk's blk_size and topology, a SCSI LUN's
// READ CAPACITY(16) and Block Limits page): the checks vmm/ makes on `--disk` and the devices
// make again when they open the image.
#pragma once

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace mvmm::devices::virtio {

struct BlockSizes {
    uint32_t logical = 512;   // 512 or 4096
    uint32_t physical = 512;  // a power of two, at least `logical`, at most 64 KiB

    // log2(physical / logical): what READ CAPACITY(16) and virtio-blk's topology report.
    uint8_t physical_exponent() const {
        return static_cast<uint8_t>(std::countr_zero(physical / logical));
    }
};

// `physical` 0 means the logical size.  Throws std::invalid_argument with what is wrong.
inline BlockSizes checked_block_sizes(uint32_t logical, uint32_t physical) {
    if (logical != 512 && logical != 4096)
        throw std::invalid_argument("logical-block-size must be 512 or 4096, not " +
                                    std::to_string(logical));
    if (physical == 0) physical = logical;
    if (!std::has_single_bit(physical) || physical < logical || physical > 65536)
        throw std::invalid_argument(
            "physical-block-size must be a power of two from "
            "logical-block-size (" +
            std::to_string(logical) + ") to 65536, not " + std::to_string(physical));
    return {logical, physical};
}

// An image of `bytes` holds whole logical blocks, at least one.  Throws std::runtime_error.
inline void check_image_fits(const std::string& path, uint64_t bytes, const BlockSizes& sizes) {
    if (bytes == 0 || bytes % sizes.logical != 0)
        throw std::runtime_error("disk image " + path + ": is " + std::to_string(bytes) +
                                 " bytes, not a positive multiple of its " +
                                 std::to_string(sizes.logical) + "-byte logical blocks");
}

}  // namespace mvmm::devices::virtio
