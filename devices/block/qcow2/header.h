// The qcow2 header, its extensions and the tables it points at, parsed and checked from bytes:
// pure functions, no I/O.  Every way a header can lie (sizes that overflow, tables past the end
// of the file, unaligned or overlapping, features we do not handle) is one message here.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "devices/block/qcow2/format.h"

namespace mvmm::devices::block::qcow2 {

inline constexpr uint32_t kMagic = 0x514649fb;  // "QFI\xfb"
inline constexpr size_t kV2HeaderLength = 72;
inline constexpr size_t kV3HeaderLength = 104;
inline constexpr uint32_t kMaxBackingNameLength = 1023;

// Where header fields live, for the few we write back.
inline constexpr size_t kRefcountTableOffsetField = 48;  // then refcount_table_clusters at 56
inline constexpr size_t kAutoclearFeaturesField = 88;

// Incompatible feature bits (an unknown one must refuse the image).
inline constexpr uint64_t kIncompatibleDirty = 1 << 0;
inline constexpr uint64_t kIncompatibleCorrupt = 1 << 1;
inline constexpr uint64_t kIncompatibleDataFile = 1 << 2;
inline constexpr uint64_t kIncompatibleCompression = 1 << 3;
inline constexpr uint64_t kIncompatibleExtendedL2 = 1 << 4;

struct Header {
    Geometry geometry;
    uint64_t size = 0;  // virtual disk bytes
    uint32_t crypt_method = 0;
    uint32_t l1_size = 0;
    uint64_t l1_table_offset = 0;
    uint64_t refcount_table_offset = 0;
    uint32_t refcount_table_clusters = 0;
    uint32_t nb_snapshots = 0;
    uint64_t incompatible_features = 0;
    uint64_t compatible_features = 0;
    uint64_t autoclear_features = 0;
    uint32_t header_length = kV2HeaderLength;
    uint8_t compression_type = 0;
    std::string backing_file;    // as stored; empty: none
    std::string backing_format;  // from the extension; empty: absent (probe)
};

// The cluster size the header at the start of `bytes` declares, if it is qcow2 and says one
// (to know how much of the file holds the header and its extensions).
std::optional<uint64_t> peek_cluster_size(std::span<const uint8_t> bytes);

// Parses and checks the header: `first_cluster` is the file's first cluster (or all of the
// file, if shorter).  The error says what is wrong, for "disk image PATH: <error>".
Result<Header, std::string> parse_header(std::span<const uint8_t> first_cluster,
                                         uint64_t file_size);

// Why an image with this header cannot be opened (writable or not), or nullopt.
std::optional<std::string> unsupported_feature(const Header& header, bool writable);

// The L1 table (`bytes` as on disk) in host order, each entry checked: an L2 table offset
// aligned to a cluster, wholly inside the file.
Result<std::vector<uint64_t>, std::string> parse_l1_table(std::span<const uint8_t> bytes,
                                                          const Geometry& geometry,
                                                          uint64_t file_size);
// The refcount table likewise: refcount block offsets aligned, inside the file.
Result<std::vector<uint64_t>, std::string> parse_refcount_table(std::span<const uint8_t> bytes,
                                                                const Geometry& geometry,
                                                                uint64_t file_size);

}  // namespace mvmm::devices::block::qcow2
