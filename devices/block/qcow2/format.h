// The qcow2 on-disk format below the header (QEMU's docs/interop/qcow2.txt): big-endian fields,
// the cluster geometry, L1/L2 entries and refcount block entries.  Pure functions over bytes,
// no I/O: every value a hostile image can hold is a unit test and a fuzz input.
#pragma once

#include <endian.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace mvmm::devices::block::qcow2 {

inline constexpr uint32_t kMinClusterBits = 9;    // 512 B
inline constexpr uint32_t kMaxClusterBits = 21;   // 2 MiB, QEMU's limit
inline constexpr uint32_t kMaxRefcountOrder = 6;  // 64-bit refcounts
inline constexpr uint64_t kSectorSize = 512;      // compressed sizes count these
// QEMU's limits on the tables it reads whole, so a header cannot make us allocate more.
inline constexpr uint64_t kMaxL1Bytes = 32 << 20;
inline constexpr uint64_t kMaxRefcountTableBytes = 8 << 20;

// L1/L2 entry bits.
inline constexpr uint64_t kCopied = 1ull << 63;      // refcount exactly one: write in place
inline constexpr uint64_t kCompressed = 1ull << 62;  // L2 only
inline constexpr uint64_t kZeroFlag = 1;             // L2 only, v3: reads as zeroes
inline constexpr uint64_t kOffsetMask = 0x00ff'ffff'ffff'fe00;  // bits 9-55: a host offset
inline constexpr uint64_t kRefcountTableOffsetMask = 0xffff'ffff'ffff'fe00;

inline uint64_t load_be64(std::span<const uint8_t> bytes, size_t at) {
    uint64_t v;
    std::memcpy(&v, bytes.subspan(at, 8).data(), 8);
    return be64toh(v);
}
inline uint32_t load_be32(std::span<const uint8_t> bytes, size_t at) {
    uint32_t v;
    std::memcpy(&v, bytes.subspan(at, 4).data(), 4);
    return be32toh(v);
}
inline void store_be64(std::span<uint8_t> bytes, size_t at, uint64_t value) {
    const uint64_t v = htobe64(value);
    std::memcpy(bytes.subspan(at, 8).data(), &v, 8);
}
inline void store_be32(std::span<uint8_t> bytes, size_t at, uint32_t value) {
    const uint32_t v = htobe32(value);
    std::memcpy(bytes.subspan(at, 4).data(), &v, 4);
}

// Sizes that follow from cluster_bits and refcount_order.
struct Geometry {
    uint32_t version = 3;
    uint32_t cluster_bits = 16;
    uint32_t refcount_order = 4;

    uint64_t cluster_size() const { return uint64_t{1} << cluster_bits; }
    uint64_t offset_in_cluster(uint64_t offset) const { return offset & (cluster_size() - 1); }
    uint64_t cluster_start(uint64_t offset) const { return offset & ~(cluster_size() - 1); }
    uint64_t l2_entries() const { return cluster_size() / 8; }
    uint64_t l2_index(uint64_t guest_offset) const {
        return (guest_offset >> cluster_bits) & (l2_entries() - 1);
    }
    uint64_t l1_index(uint64_t guest_offset) const {
        return guest_offset >> (cluster_bits + cluster_bits - 3);
    }
    // Guest bytes one L2 table maps.
    uint64_t l2_span() const { return cluster_size() * l2_entries(); }
    uint64_t refcount_bits() const { return uint64_t{1} << refcount_order; }
    uint64_t refcount_max() const {
        return refcount_order == 6 ? ~uint64_t{0} : (uint64_t{1} << refcount_bits()) - 1;
    }
    uint64_t refcounts_per_block() const { return cluster_size() * 8 / refcount_bits(); }
    // L1 entries a virtual size needs (no overflow for any 64-bit size).
    uint64_t l1_entries_for(uint64_t virtual_size) const {
        return virtual_size / l2_span() + (virtual_size % l2_span() != 0);
    }
};

// What an L2 entry says a guest cluster is.
enum class ClusterKind {
    Unallocated,  // reads from the backing file, or zeroes without one
    Zero,         // reads as zeroes; host_offset may hold a preallocated cluster
    Data,         // at host_offset
    Compressed,   // deflated at host_offset, compressed_bytes long
};

struct L2Entry {
    ClusterKind kind = ClusterKind::Unallocated;
    uint64_t host_offset = 0;
    uint64_t compressed_bytes = 0;
    bool copied = false;  // refcount exactly one: Data may be written in place

    // How many bytes from host_offset this entry holds a reference to (0: none).
    uint64_t referenced_bytes(const Geometry& geometry) const;
};

// nullopt for an entry no correct image holds: a data or preallocated-zero cluster not aligned
// to a cluster, or the zero flag in a version 2 image (QEMU fails such reads with EIO too).
std::optional<L2Entry> decode_l2_entry(uint64_t raw, const Geometry& geometry);

// A standard L2 entry for a cluster of ours at `host_offset`.
inline uint64_t data_entry(uint64_t host_offset) {
    return host_offset | kCopied;
}

// Refcount block entries are refcount_bits wide; sub-byte widths count from the low bit.
uint64_t get_refcount(std::span<const uint8_t> block, uint64_t index, uint32_t refcount_order);
void set_refcount(std::span<uint8_t> block, uint64_t index, uint32_t refcount_order,
                  uint64_t value);

}  // namespace mvmm::devices::block::qcow2
