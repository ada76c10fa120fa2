#include "devices/block/qcow2/header.h"

#include <cinttypes>
#include <cstdio>

namespace mvmm::devices::block::qcow2 {
namespace {

constexpr uint32_t kExtensionEnd = 0;
constexpr uint32_t kExtensionBackingFormat = 0xe2792aca;
constexpr size_t kMaxFormatNameLength = 15;  // QEMU keeps it in 16 bytes

std::string hex(uint64_t value) {
    char text[24];
    std::snprintf(text, sizeof text, "%#" PRIx64, value);
    return text;
}

// Whether [offset, offset + bytes) lies inside a file of `file_size` bytes (no wrap-around).
bool inside(uint64_t offset, uint64_t bytes, uint64_t file_size) {
    return offset <= file_size && bytes <= file_size - offset;
}

// Two ranges inside one file (so the sums cannot wrap).
bool overlap(uint64_t a, uint64_t a_bytes, uint64_t b, uint64_t b_bytes) {
    return a_bytes != 0 && b_bytes != 0 && a < b + b_bytes && b < a + a_bytes;
}

using Error = std::optional<std::string>;

Error parse_fixed_fields(std::span<const uint8_t> bytes, Header& h, uint32_t& backing_bytes,
                         uint64_t& backing_offset) {
    if (bytes.size() < kV2HeaderLength) return "too short for a qcow2 header";
    if (load_be32(bytes, 0) != kMagic) return "not a qcow2 image (no QFI\\xfb magic)";
    h.geometry.version = load_be32(bytes, 4);
    if (h.geometry.version != 2 && h.geometry.version != 3)
        return "qcow2 version " + std::to_string(h.geometry.version) +
               " is not supported (2 and 3 are)";
    backing_offset = load_be64(bytes, 8);
    backing_bytes = load_be32(bytes, 16);
    h.geometry.cluster_bits = load_be32(bytes, 20);
    if (h.geometry.cluster_bits < kMinClusterBits || h.geometry.cluster_bits > kMaxClusterBits)
        return "cluster_bits " + std::to_string(h.geometry.cluster_bits) +
               " is out of range (9-21: 512 B to 2 MiB)";
    h.size = load_be64(bytes, 24);
    h.crypt_method = load_be32(bytes, 32);
    h.l1_size = load_be32(bytes, 36);
    h.l1_table_offset = load_be64(bytes, 40);
    h.refcount_table_offset = load_be64(bytes, 48);
    h.refcount_table_clusters = load_be32(bytes, 56);
    h.nb_snapshots = load_be32(bytes, 60);
    h.geometry.refcount_order = 4;  // version 2: 16-bit refcounts
    if (h.geometry.version == 2) return std::nullopt;

    if (bytes.size() < kV3HeaderLength) return "too short for a qcow2 version 3 header";
    h.incompatible_features = load_be64(bytes, 72);
    h.compatible_features = load_be64(bytes, 80);
    h.autoclear_features = load_be64(bytes, 88);
    h.geometry.refcount_order = load_be32(bytes, 96);
    h.header_length = load_be32(bytes, 100);
    if (h.geometry.refcount_order > kMaxRefcountOrder)
        return "refcount_order " + std::to_string(h.geometry.refcount_order) +
               " is out of range (refcounts are at most 64 bits)";
    if (h.header_length < kV3HeaderLength) return "header_length is below 104 bytes";
    if (h.header_length > h.geometry.cluster_size() || h.header_length > bytes.size())
        return "header_length " + std::to_string(h.header_length) +
               " runs past the first cluster or the file";
    if (h.header_length > kV3HeaderLength) h.compression_type = bytes[kV3HeaderLength];
    return std::nullopt;
}

Error check_l1_table(const Header& h, uint64_t file_size) {
    const Geometry& g = h.geometry;
    if (h.l1_size > kMaxL1Bytes / 8)
        return "the L1 table of " + std::to_string(h.l1_size) +
               " entries is larger than 32 MiB (QEMU's limit)";
    const uint64_t needed = g.l1_entries_for(h.size);
    if (h.l1_size < needed)
        return "the L1 table of " + std::to_string(h.l1_size) +
               " entries is too small for the virtual size of " + std::to_string(h.size) +
               " bytes (it needs " + std::to_string(needed) + ")";
    if (h.l1_size == 0) return std::nullopt;
    const uint64_t bytes = uint64_t{h.l1_size} * 8;
    if (g.offset_in_cluster(h.l1_table_offset) != 0)
        return "the L1 table offset " + hex(h.l1_table_offset) + " is not cluster aligned";
    if (!inside(h.l1_table_offset, bytes, file_size))
        return "the L1 table (" + std::to_string(bytes) + " bytes at " + hex(h.l1_table_offset) +
               ") lies past the end of the file (" + std::to_string(file_size) + " bytes)";
    if (h.l1_table_offset < g.cluster_size()) return "the L1 table overlaps the header";
    return std::nullopt;
}

Error check_refcount_table(const Header& h, uint64_t file_size) {
    const Geometry& g = h.geometry;
    if (h.refcount_table_clusters == 0) return "the image has no refcount table";
    if (h.refcount_table_clusters > kMaxRefcountTableBytes / g.cluster_size())
        return "the refcount table of " + std::to_string(h.refcount_table_clusters) +
               " clusters is larger than 8 MiB (QEMU's limit)";
    const uint64_t bytes = h.refcount_table_clusters * g.cluster_size();
    if (g.offset_in_cluster(h.refcount_table_offset) != 0)
        return "the refcount table offset " + hex(h.refcount_table_offset) +
               " is not cluster aligned";
    if (!inside(h.refcount_table_offset, bytes, file_size))
        return "the refcount table (" + std::to_string(bytes) + " bytes at " +
               hex(h.refcount_table_offset) + ") lies past the end of the file (" +
               std::to_string(file_size) + " bytes)";
    if (h.refcount_table_offset < g.cluster_size()) return "the refcount table overlaps the header";
    if (overlap(h.refcount_table_offset, bytes, h.l1_table_offset, uint64_t{h.l1_size} * 8))
        return "the refcount table overlaps the L1 table";
    return std::nullopt;
}

// Header extensions run from the end of the header to `end`, each padded to 8 bytes.
Error parse_extensions(std::span<const uint8_t> bytes, uint64_t begin, uint64_t end, Header& h) {
    uint64_t at = begin;
    while (at < end) {
        if (end - at < 8) return "a header extension runs past the end of its area";
        const uint32_t type = load_be32(bytes, at);
        const uint32_t length = load_be32(bytes, at + 4);
        at += 8;
        if (length > end - at) return "a header extension runs past the end of its area";
        if (type == kExtensionEnd) break;
        if (type == kExtensionBackingFormat) {
            if (length > kMaxFormatNameLength) return "the backing format name is too long";
            h.backing_format.assign(reinterpret_cast<const char*>(&bytes[at]), length);
        }
        at += (uint64_t{length} + 7) & ~uint64_t{7};  // other extensions: safe to ignore
    }
    return std::nullopt;
}

Error read_backing_name(std::span<const uint8_t> bytes, uint64_t offset, uint32_t length,
                        Header& h) {
    if (offset == 0 || length == 0) return std::nullopt;
    if (length > kMaxBackingNameLength) return "the backing file name is longer than 1023 bytes";
    if (offset > h.geometry.cluster_size() || length > h.geometry.cluster_size() - offset)
        return "the backing file name lies outside the first cluster";
    if (!inside(offset, length, bytes.size()))
        return "the backing file name lies past the end of the file";
    h.backing_file.assign(reinterpret_cast<const char*>(&bytes[offset]), length);
    if (h.backing_file.find('\0') != std::string::npos)
        return "the backing file name holds a NUL byte";
    return std::nullopt;
}

Result<std::vector<uint64_t>, std::string> parse_table(std::span<const uint8_t> bytes,
                                                       uint64_t offset_mask, uint64_t cluster_size,
                                                       uint64_t file_size, const char* what) {
    std::vector<uint64_t> entries(bytes.size() / 8);
    for (size_t i = 0; i < entries.size(); ++i) {
        entries[i] = load_be64(bytes, i * 8);
        const uint64_t offset = entries[i] & offset_mask;
        if (offset == 0) continue;
        if (offset & (cluster_size - 1))
            return Unexpected{std::string(what) + " entry " + std::to_string(i) + " (" +
                              hex(offset) + ") is not cluster aligned"};
        if (!inside(offset, cluster_size, file_size))
            return Unexpected{std::string(what) + " entry " + std::to_string(i) + " (" +
                              hex(offset) + ") points past the end of the file"};
    }
    return entries;
}

}  // namespace

std::optional<uint64_t> peek_cluster_size(std::span<const uint8_t> bytes) {
    if (bytes.size() < kV2HeaderLength || load_be32(bytes, 0) != kMagic) return std::nullopt;
    const uint32_t bits = load_be32(bytes, 20);
    if (bits < kMinClusterBits || bits > kMaxClusterBits) return std::nullopt;
    return uint64_t{1} << bits;
}

Result<Header, std::string> parse_header(std::span<const uint8_t> first_cluster,
                                         uint64_t file_size) {
    Header h;
    uint32_t backing_bytes = 0;
    uint64_t backing_offset = 0;
    Error error = parse_fixed_fields(first_cluster, h, backing_bytes, backing_offset);
    if (!error) error = check_l1_table(h, file_size);
    if (!error) error = check_refcount_table(h, file_size);
    if (!error) error = read_backing_name(first_cluster, backing_offset, backing_bytes, h);
    if (!error) {
        // Extensions end where the backing file name starts, or with the first cluster.
        const uint64_t end = std::min<uint64_t>(
            backing_offset != 0 ? backing_offset : h.geometry.cluster_size(), first_cluster.size());
        if (end > h.header_length) error = parse_extensions(first_cluster, h.header_length, end, h);
    }
    if (error) return Unexpected{*error};
    return h;
}

std::optional<std::string> unsupported_feature(const Header& h, bool writable) {
    constexpr uint64_t kKnown = kIncompatibleDirty | kIncompatibleCorrupt | kIncompatibleDataFile |
                                kIncompatibleCompression | kIncompatibleExtendedL2;
    const uint64_t incompatible = h.incompatible_features;
    if (h.crypt_method != 0) return "encrypted qcow2 images are not supported";
    if (incompatible & ~kKnown)
        return "unknown incompatible qcow2 features " + hex(incompatible & ~kKnown);
    if (incompatible & kIncompatibleDataFile) return "external data files are not supported";
    if (incompatible & kIncompatibleExtendedL2)
        return "extended L2 entries (subclusters) are not supported";
    if ((incompatible & kIncompatibleCompression) || h.compression_type != 0)
        return "compression types other than zlib are not supported";
    if (writable && (incompatible & kIncompatibleDirty))
        return "its refcounts are not up to date (dirty, lazy refcounts): repair it with "
               "qemu-img check -r all, or attach it read-only";
    if (writable && (incompatible & kIncompatibleCorrupt))
        return "it is marked corrupt: repair it with qemu-img check -r all, or attach it "
               "read-only";
    return std::nullopt;
}

Result<std::vector<uint64_t>, std::string> parse_l1_table(std::span<const uint8_t> bytes,
                                                          const Geometry& geometry,
                                                          uint64_t file_size) {
    return parse_table(bytes, kOffsetMask, geometry.cluster_size(), file_size, "L1");
}

Result<std::vector<uint64_t>, std::string> parse_refcount_table(std::span<const uint8_t> bytes,
                                                                const Geometry& geometry,
                                                                uint64_t file_size) {
    return parse_table(bytes, kRefcountTableOffsetMask, geometry.cluster_size(), file_size,
                       "refcount table");
}

}  // namespace mvmm::devices::block::qcow2
