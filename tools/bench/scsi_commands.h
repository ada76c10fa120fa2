// What the virtio-scsi side of the request bench sends (scsi_requests.cc lays it out and checks
// the answers): in the mixed workload, every command the target serves with 4 KiB transfers,
// the mistakes it answers with sense or a virtio response, and task management and event
// queries for the control queue.
#pragma once

#include <linux/virtio_scsi.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mvmm::bench {

using Bytes = std::vector<uint8_t>;

inline constexpr uint64_t kScsiBlock = 512;
inline constexpr uint8_t kGood = 0x00, kCheckCondition = 0x02;
inline constexpr uint8_t kIllegalRequest = 0x5, kUnitAttention = 0x6, kMiscompare = 0xe;

struct ScsiCommand {
    const char* name;
    Bytes cdb;
    uint64_t transfer = 0;  // READ/WRITE at a place the rig picks: bytes, LBA at cdb[2]
    size_t lba_bytes = 4;   // ... 4 bytes (10-byte CDBs) or 8 (16-byte ones)
    bool write = false;
    Bytes out = {};   // another command's data-out
    uint32_t in = 0;  // another command's data-in
    uint8_t response = VIRTIO_SCSI_S_OK;
    uint8_t status = kGood;
    uint8_t sense_key = 0;                                  // with CHECK CONDITION
    std::vector<std::pair<uint16_t, uint8_t>> answer = {};  // data-in bytes to expect
    uint16_t lun = 0;
    bool other_target = false;
};

// A task management function or an event query: a request, a response whose byte `at` says.
struct ScsiControl {
    const char* name;
    Bytes request;
    uint32_t response_bytes;
    size_t at;
    uint8_t expected;
};

template <class T>
Bytes bytes_of(const T& value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    return {p, p + sizeof value};
}

// The 8-byte LUN field addressing `lun` of target 0 (peripheral addressing below 256), or of
// target 1 when `other_target`.
void address_lun(uint8_t* field, uint16_t lun, bool other_target = false);

// READ(10) of `bytes` at the place the rig picks.
ScsiCommand scsi_read(uint64_t bytes);
// For an image of `image_bytes` (the scratch area at its end).
std::vector<ScsiCommand> mixed_commands(uint64_t image_bytes);
std::vector<ScsiControl> control_requests();

}  // namespace mvmm::bench
