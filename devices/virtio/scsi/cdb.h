// SCSI commands (SPC-4, SBC-3) parsed from a CDB into a checked Command before anything runs.
// parse_cdb() is a pure function of the CDB bytes and the LUN's size: every field is checked
// (CDB length, reserved bits this target gives no meaning, LBA + length past the end, with
// wrap-around, writes to a read-only LUN), so each hostile CDB is a unit test, and what is not
// a Command is the sense data a real target would return.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>

#include "base/result.h"
#include "devices/virtio/scsi/sense.h"

namespace mvmm::devices::virtio::scsi {

// What parsing needs to know about the logical unit: a snapshot, since the guest may turn the
// write cache off and the host may grow the image while commands run.
struct LunInfo {
    uint64_t blocks = 0;
    bool read_only = false;
    uint32_t block_size = 512;      // logical: 512 or 4096
    uint8_t physical_exponent = 0;  // log2(physical block size / logical block size)
    bool write_cache = true;        // WCE in the caching mode page

    // [lba, lba + count) lies on the LUN; written so that no sum can wrap.
    constexpr bool holds(uint64_t lba, uint64_t count) const {
        return lba <= blocks && count <= blocks - lba;
    }
};

// Limits this target reports in the Block Limits VPD page and enforces.
inline constexpr uint32_t kMaxUnmapBlocks = 1u << 21;  // per command: 1 GiB, holes are cheap
inline constexpr uint32_t kMaxUnmapDescriptors = 32;
// 128 MiB: where fallocate cannot zero, the I/O thread writes the zeroes itself.
inline constexpr uint32_t kMaxWriteSameBlocks = 1u << 18;
inline constexpr uint32_t kUnmapGranularityBytes = 4096;  // host filesystems free 4 KiB blocks
// The largest block, for the copies WRITE SAME and VERIFY make on the I/O thread's stack.
inline constexpr uint32_t kMaxBlockSize = 4096;

// The VPD pages INQUIRY answers, in the order page 00h lists them.
inline constexpr uint8_t kVpdPages[] = {0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2};

// Mode pages MODE SENSE answers; kAllPages asks for all of them.
namespace mode_page {
inline constexpr uint8_t kCaching = 0x08;
inline constexpr uint8_t kControl = 0x0a;
inline constexpr uint8_t kAllPages = 0x3f;
}  // namespace mode_page

enum class PageControl : uint8_t { Current = 0, Changeable = 1, Default = 2 };

struct TestUnitReady {};
struct StartStopUnit {};
struct RequestSense {
    bool descriptor_format = false;
};
struct Inquiry {
    std::optional<uint8_t> vpd_page;  // standard data when empty
};
struct ModeSense {
    uint8_t page = 0;
    PageControl control = PageControl::Current;
    bool block_descriptor = true;
    bool ten = false;  // MODE SENSE(10): an 8-byte header
};
struct ReadCapacity {
    bool sixteen = false;
};
struct ReportLuns {
    bool well_known_only = false;  // this target has none: an empty list
};
struct Read {
    uint64_t lba = 0;
    uint32_t blocks = 0;
};
struct Write {
    uint64_t lba = 0;
    uint32_t blocks = 0;
    bool fua = false;  // stable before it completes
};
struct SynchronizeCache {};
struct Unmap {};  // the block descriptors come in the data-out buffer: unmap_list.h
struct WriteSame {
    uint64_t lba = 0;
    uint32_t blocks = 0;
    bool unmap = false;
    bool no_data_out = false;  // NDOB: the block is zeroes, none is sent
};
struct Verify {
    uint64_t lba = 0;
    uint32_t blocks = 0;
    bool compare = false;  // BYTCHK 01b: the data-out must match the medium
};
// The mode parameter list comes in the data-out buffer: mode_select.h.
struct ModeSelect {
    bool ten = false;  // MODE SELECT(10): an 8-byte header
};
// REPORT SUPPORTED OPERATION CODES (SPC-4, 6.35), without timeouts descriptors.
struct ReportOpcodes {
    uint8_t options = 0;  // 0: every command; 1, 2, 3: the one named
    uint8_t opcode = 0;
    uint16_t service_action = 0;
};

using Operation = std::variant<TestUnitReady, StartStopUnit, RequestSense, Inquiry, ModeSense,
                               ReadCapacity, ReportLuns, Read, Write, SynchronizeCache, Unmap,
                               WriteSame, Verify, ModeSelect, ReportOpcodes>;

enum class Direction { None, In, Out };

struct Command {
    Operation operation;
    Direction direction = Direction::None;
    // The bytes the CDB moves: exactly this for transfers and parameter lists, at most this
    // (the allocation length) for what the target answers.
    uint64_t transfer_bytes = 0;
};

Result<Command, Sense> parse_cdb(std::span<const uint8_t> cdb, const LunInfo& lun);

// A command this target supports, as REPORT SUPPORTED OPERATION CODES describes it.
struct CommandUsage {
    uint8_t opcode = 0;
    int32_t service_action = -1;  // -1: the command has none
    uint8_t length = 0;
    std::array<uint8_t, 16> usage{};  // CDB usage data (SPC-4, 6.35.3): the bits the target reads
};
// Every command parse_cdb() takes, in opcode order.
inline constexpr size_t kSupportedCommandCount = 27;
std::span<const CommandUsage> supported_commands();

}  // namespace mvmm::devices::virtio::scsi
