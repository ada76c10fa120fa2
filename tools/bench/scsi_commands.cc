#include "bench/scsi_commands.h"

#include <cstring>
#include <initializer_list>

#include "bench/requests.h"
#include "devices/virtio/scsi/big_endian.h"
#include "devices/virtio/scsi/cdb.h"

namespace mvmm::bench {
namespace {

namespace scsi = devices::virtio::scsi;

constexpr uint64_t kPage = 4096;
constexpr uint16_t kNoDisk = 7;  // a LUN number without a disk

Bytes cdb16(uint8_t opcode, uint8_t flags, uint64_t lba, uint32_t blocks) {
    Bytes cdb(16, 0);
    cdb[0] = opcode;
    cdb[1] = flags;
    scsi::store_be(cdb, 2, lba, 8);
    scsi::store_be(cdb, 10, blocks, 4);
    return cdb;
}

// UNMAP's parameter list with one descriptor per range.
Bytes unmap_list(std::initializer_list<std::pair<uint64_t, uint32_t>> ranges) {
    Bytes list(8 + 16 * ranges.size(), 0);
    scsi::store_be(list, 0, list.size() - 2, 2);
    scsi::store_be(list, 2, list.size() - 8, 2);
    size_t at = 8;
    for (const auto& [lba, blocks] : ranges) {
        scsi::store_be(list, at, lba, 8);
        scsi::store_be(list, at + 8, blocks, 4);
        at += 16;
    }
    return list;
}

// The first block of the image as the rig wrote it: writes only ever write the same pattern.
Bytes first_block() {
    Bytes block(kScsiBlock);
    for (uint64_t at = 0; at < kScsiBlock; at += 8) {
        const uint64_t word = pattern_word(at);  // in the image's (the host's) byte order
        std::memcpy(block.data() + at, &word, sizeof word);
    }
    return block;
}

// The caching page with WCE set, as MODE SELECT(6) or (10) sends it: the setting it has.
Bytes caching_page_parameters(bool ten) {
    Bytes list(ten ? 8 : 4, 0);
    list.insert(list.end(), {0x08, 0x12, 0x04});
    list.resize(list.size() + 17, 0);
    return list;
}

// Reads, writes, flushes, deallocation and verification: what touches the image.
std::vector<ScsiCommand> transfers(uint64_t image_bytes) {
    const uint64_t scratch = (image_bytes - kScratchBytes) / kScsiBlock;
    ScsiCommand write10 = scsi_read(kPage);
    write10.name = "WRITE(10)";
    write10.cdb[0] = 0x2a;
    write10.write = true;
    Bytes write_same10{0x41, 0, 0, 0, 0, 0, 0, 0, 16, 0};
    scsi::store_be(write_same10, 2, scratch + 1536, 4);
    return {
        scsi_read(kPage),
        write10,
        {.name = "READ(16)", .cdb = cdb16(0x88, 0, 0, 8), .transfer = kPage, .lba_bytes = 8},
        {.name = "WRITE(16) FUA",
         .cdb = cdb16(0x8a, 0x08, 0, 8),
         .transfer = kPage,
         .lba_bytes = 8,
         .write = true},
        {.name = "SYNCHRONIZE CACHE(10)", .cdb = {0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {.name = "UNMAP",
         .cdb = {0x42, 0, 0, 0, 0, 0, 0, 0, 40, 0},
         .out = unmap_list({{scratch, 8}, {scratch + 64, 16}})},
        {.name = "WRITE SAME(16) UNMAP",
         .cdb = cdb16(0x93, 0x08, scratch + 8, 8),
         .out = Bytes(kScsiBlock, 0)},
        // tmpfs has no FALLOC_FL_ZERO_RANGE: the device writes these zeroes itself.
        {.name = "WRITE SAME(16) NDOB", .cdb = cdb16(0x93, 0x01, scratch + 512, 256)},
        {.name = "WRITE SAME(16), a pattern",
         .cdb = cdb16(0x93, 0, scratch + 1024, 64),
         .out = Bytes(kScsiBlock, 0xa5)},
        {.name = "WRITE SAME(10), a pattern", .cdb = write_same10, .out = Bytes(kScsiBlock, 0x5a)},
        {.name = "UNMAP without a parameter list", .cdb = {0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {.name = "VERIFY(10), medium only", .cdb = {0x2f, 0, 0, 0, 0, 0, 0, 0, 8, 0}},
        {.name = "VERIFY(16), medium only", .cdb = cdb16(0x8f, 0, 0, 8)},
        {.name = "VERIFY(10), compared",
         .cdb = {0x2f, 0x02, 0, 0, 0, 0, 0, 0, 1, 0},
         .out = first_block()},
        {.name = "VERIFY(16), a miscompare",
         .cdb = cdb16(0x8f, 0x02, 0, 1),
         .out = Bytes(kScsiBlock, 0xff),
         .status = kCheckCondition,
         .sense_key = kMiscompare},
    };
}

// What the target answers from what it knows: inquiry, mode pages, capacity, LUNs, sense.
std::vector<ScsiCommand> answers(uint64_t blocks) {
    const auto last = static_cast<uint8_t>(blocks - 1);
    std::vector<ScsiCommand> commands{
        {.name = "TEST UNIT READY", .cdb = {0x00, 0, 0, 0, 0, 0}},
        {.name = "START STOP UNIT", .cdb = {0x1b, 0, 0, 0, 1, 0}},
        {.name = "INQUIRY",
         .cdb = {0x12, 0, 0, 0, 96, 0},
         .in = 96,
         .answer = {{0, 0x00}, {4, 31}, {8, 'M'}}},
        {.name = "MODE SENSE(6), all pages",
         .cdb = {0x1a, 0, 0x3f, 0, 255, 0},
         .in = 255,
         .answer = {{0, 3 + 8 + 20 + 12}}},
        {.name = "MODE SENSE(10), caching, no block descriptor",
         .cdb = {0x5a, 0x08, 0x08, 0, 0, 0, 0, 0, 255, 0},
         .in = 255,
         .answer = {{1, 6 + 20}, {8, 0x08}}},
        {.name = "MODE SENSE(10), changeable caching",
         .cdb = {0x5a, 0x08, 0x48, 0, 0, 0, 0, 0, 255, 0},
         .in = 255,
         .answer = {{8, 0x08}, {10, 0x04}}},
        {.name = "MODE SELECT(6), caching",
         .cdb = {0x15, 0x10, 0, 0, 24, 0},
         .out = caching_page_parameters(false)},
        {.name = "MODE SELECT(10), caching",
         .cdb = {0x55, 0x10, 0, 0, 0, 0, 0, 0, 28, 0},
         .out = caching_page_parameters(true)},
        {.name = "READ CAPACITY(10)",
         .cdb = {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0},
         .in = 8,
         .answer = {{3, last}, {6, 2}}},
        {.name = "READ CAPACITY(16)",
         .cdb = cdb16(0x9e, 0x10, 0, 32),
         .in = 32,
         .answer = {{7, last}, {14, 0x80}}},
        {.name = "REPORT LUNS",
         .cdb = {0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0},
         .in = 256,
         .answer = {{3, 8}, {9, 0}}},
        {.name = "REQUEST SENSE", .cdb = {0x03, 0, 0, 0, 18, 0}, .in = 18, .answer = {{0, 0x70}}},
        {.name = "REQUEST SENSE, descriptor format",
         .cdb = {0x03, 1, 0, 0, 8, 0},
         .in = 8,
         .answer = {{0, 0x72}}},
        {.name = "REPORT SUPPORTED OPERATION CODES, all",
         .cdb = {0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0},
         .in = 1024},
        {.name = "REPORT SUPPORTED OPERATION CODES, READ(10)",
         .cdb = {0xa3, 0x0c, 0x01, 0x28, 0, 0, 0, 0, 0, 32, 0, 0},
         .in = 32,
         .answer = {{1, 0x03}, {3, 10}}},
    };
    for (uint8_t page : scsi::kVpdPages) {
        commands.push_back({.name = "INQUIRY, a VPD page",
                            .cdb = {0x12, 1, page, 0, 255, 0},
                            .in = 255,
                            .answer = {{1, page}}});
    }
    return commands;
}

// Mistakes a driver can make, each with the answer a real target gives.
std::vector<ScsiCommand> mistakes(uint64_t blocks) {
    return {
        {.name = "an unknown opcode",
         .cdb = {0xff, 0, 0, 0, 0, 0},
         .status = kCheckCondition,
         .sense_key = kIllegalRequest},
        {.name = "READ(16) past the end",
         .cdb = cdb16(0x88, 0, blocks, 1),
         .in = kScsiBlock,
         .status = kCheckCondition,
         .sense_key = kIllegalRequest},
        {.name = "INQUIRY of a LUN without a disk",
         .cdb = {0x12, 0, 0, 0, 36, 0},
         .in = 36,
         .answer = {{0, 0x7f}},
         .lun = kNoDisk},
        {.name = "TEST UNIT READY of a LUN without a disk",
         .cdb = {0x00, 0, 0, 0, 0, 0},
         .status = kCheckCondition,
         .sense_key = kIllegalRequest,
         .lun = kNoDisk},
        {.name = "READ(10) into too little room",
         .cdb = {0x28, 0, 0, 0, 0, 0, 0, 0, 8, 0},
         .in = kScsiBlock,
         .response = VIRTIO_SCSI_S_OVERRUN},
        {.name = "another target",
         .cdb = {0x00, 0, 0, 0, 0, 0},
         .response = VIRTIO_SCSI_S_BAD_TARGET,
         .other_target = true},
    };
}

ScsiControl tmf(const char* name, uint32_t subtype, uint16_t lun, uint8_t expected) {
    virtio_scsi_ctrl_tmf_req request{};
    request.type = VIRTIO_SCSI_T_TMF;
    request.subtype = subtype;
    address_lun(request.lun, lun);
    return {name, bytes_of(request), sizeof(virtio_scsi_ctrl_tmf_resp),
            offsetof(virtio_scsi_ctrl_tmf_resp, response), expected};
}

}  // namespace

void address_lun(uint8_t* field, uint16_t lun, bool other_target) {
    field[0] = 1;
    field[1] = other_target ? 1 : 0;
    field[2] = static_cast<uint8_t>(lun >> 8);
    field[3] = static_cast<uint8_t>(lun);
}

ScsiCommand scsi_read(uint64_t bytes) {
    Bytes cdb{0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    scsi::store_be(cdb, 7, bytes / kScsiBlock, 2);
    return {.name = "READ(10)", .cdb = cdb, .transfer = bytes};
}

std::vector<ScsiCommand> mixed_commands(uint64_t image_bytes) {
    const uint64_t blocks = image_bytes / kScsiBlock;
    std::vector<ScsiCommand> commands = transfers(image_bytes);
    for (auto&& more : {answers(blocks), mistakes(blocks)})
        commands.insert(commands.end(), more.begin(), more.end());
    return commands;
}

std::vector<ScsiControl> control_requests() {
    virtio_scsi_ctrl_an_req query{};
    query.type = VIRTIO_SCSI_T_AN_QUERY;
    address_lun(query.lun, 0);
    query.event_requested = 1u << 6;  // media change
    return {
        tmf("ABORT TASK", VIRTIO_SCSI_T_TMF_ABORT_TASK, 0, VIRTIO_SCSI_S_OK),
        tmf("LOGICAL UNIT RESET", VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET, 0, VIRTIO_SCSI_S_OK),
        tmf("QUERY TASK SET of a LUN without a disk", VIRTIO_SCSI_T_TMF_QUERY_TASK_SET, kNoDisk,
            VIRTIO_SCSI_S_INCORRECT_LUN),
        tmf("CLEAR ACA", VIRTIO_SCSI_T_TMF_CLEAR_ACA, 0, VIRTIO_SCSI_S_FUNCTION_REJECTED),
        {"event query", bytes_of(query), sizeof(virtio_scsi_ctrl_an_resp),
         offsetof(virtio_scsi_ctrl_an_resp, response), VIRTIO_SCSI_S_OK},
    };
}

}  // namespace mvmm::bench
