#include "devices/block/qcow2/format.h"

namespace mvmm::devices::block::qcow2 {

uint64_t L2Entry::referenced_bytes(const Geometry& geometry) const {
    switch (kind) {
        case ClusterKind::Data:
            return geometry.cluster_size();
        case ClusterKind::Zero:
            return host_offset != 0 ? geometry.cluster_size() : 0;
        case ClusterKind::Compressed:
            return compressed_bytes;
        case ClusterKind::Unallocated:
            break;
    }
    return 0;
}

std::optional<L2Entry> decode_l2_entry(uint64_t raw, const Geometry& geometry) {
    L2Entry entry;
    if (raw & kCompressed) {
        // Compressed cluster descriptor: the offset in the low bits, then the count of 512-byte
        // sectors beyond the first; the data ends somewhere in the last sector.
        const uint32_t size_shift = 62 - (geometry.cluster_bits - 8);
        const uint64_t size_mask = (uint64_t{1} << (geometry.cluster_bits - 8)) - 1;
        entry.kind = ClusterKind::Compressed;
        entry.host_offset = raw & ((uint64_t{1} << size_shift) - 1);
        const uint64_t sectors = ((raw >> size_shift) & size_mask) + 1;
        entry.compressed_bytes = sectors * kSectorSize - (entry.host_offset % kSectorSize);
        return entry;
    }
    entry.host_offset = raw & kOffsetMask;
    entry.copied = (raw & kCopied) != 0;
    if (raw & kZeroFlag) {
        if (geometry.version < 3) return std::nullopt;
        entry.kind = ClusterKind::Zero;
    } else if (entry.host_offset != 0) {
        entry.kind = ClusterKind::Data;
    } else {
        entry.copied = false;
        return entry;  // unallocated
    }
    if (geometry.offset_in_cluster(entry.host_offset) != 0) return std::nullopt;
    return entry;
}

uint64_t get_refcount(std::span<const uint8_t> block, uint64_t index, uint32_t refcount_order) {
    if (refcount_order < 3) {  // 1, 2 or 4 bits, from the low bit of each byte
        const uint32_t bits = 1u << refcount_order;
        const uint64_t per_byte = 8 / bits;
        const uint32_t shift = static_cast<uint32_t>((index % per_byte) * bits);
        return (block[index / per_byte] >> shift) & ((1u << bits) - 1);
    }
    const uint64_t bytes = uint64_t{1} << (refcount_order - 3);
    uint64_t value = 0;
    for (uint64_t i = 0; i < bytes; ++i) value = (value << 8) | block[index * bytes + i];
    return value;
}

void set_refcount(std::span<uint8_t> block, uint64_t index, uint32_t refcount_order,
                  uint64_t value) {
    if (refcount_order < 3) {
        const uint32_t bits = 1u << refcount_order;
        const uint64_t per_byte = 8 / bits;
        const uint32_t shift = static_cast<uint32_t>((index % per_byte) * bits);
        const uint32_t mask = ((1u << bits) - 1) << shift;
        uint8_t& byte = block[index / per_byte];
        byte = static_cast<uint8_t>((byte & ~mask) | ((value << shift) & mask));
        return;
    }
    const uint64_t bytes = uint64_t{1} << (refcount_order - 3);
    for (uint64_t i = bytes; i-- > 0; value >>= 8)
        block[index * bytes + i] = static_cast<uint8_t>(value);
}

}  // namespace mvmm::devices::block::qcow2
