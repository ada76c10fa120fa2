#include "devices/virtio/scsi/unmap_list.h"

#include <array>
#include <span>

#include "devices/virtio/scsi/big_endian.h"

namespace mvmm::devices::virtio::scsi {

Result<UnmapRanges, Sense> parse_unmap_list(const GuestBuffers& list, const LunInfo& lun) {
    constexpr size_t kHeader = 8, kDescriptor = 16;
    std::array<uint8_t, kHeader + kDescriptor * kMaxUnmapDescriptors> copy;
    const auto head = std::span(copy).first(list.copy_to(0, copy));
    if (head.size() < kHeader) return Unexpected{sense::kParameterListLength};
    const uint64_t data_length = load_be(head, 0, 2);         // bytes after this field
    const uint64_t descriptors_length = load_be(head, 2, 2);  // a partial last one is ignored
    if (descriptors_length + kHeader > list.size() || descriptors_length + 6 > data_length)
        return Unexpected{sense::kParameterListLength};
    const uint64_t count = descriptors_length / kDescriptor;
    if (count > kMaxUnmapDescriptors) return Unexpected{sense::kInvalidFieldInParameterList};
    UnmapRanges ranges;
    uint64_t total = 0;                     // at most 32 x 32 bits: no wrap
    for (uint64_t i = 0; i < count; ++i) {  // every one of them is in `head`
        const size_t at = kHeader + i * kDescriptor;
        const BlockRange range{load_be(head, at, 8),
                               static_cast<uint32_t>(load_be(head, at + 8, 4))};
        if (!lun.holds(range.lba, range.blocks)) return Unexpected{sense::kLbaOutOfRange};
        total += range.blocks;
        if (range.blocks > 0) ranges.push_back(range);
    }
    if (total > kMaxUnmapBlocks) return Unexpected{sense::kInvalidFieldInParameterList};
    return ranges;
}

}  // namespace mvmm::devices::virtio::scsi
