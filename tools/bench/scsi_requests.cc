// The virtio-scsi driver side of the request bench (requests.h): virtio_scsi's command requests
// (a virtio_scsi_cmd_req with its CDB, data-out; a virtio_scsi_cmd_resp, data-in) on one LUN, and
// in the mixed workload every command the target serves, the mistakes it answers with sense,
// and task management and event queries on the control queue.
#include <linux/virtio_scsi.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "bench/requests.h"
#include "devices/virtio/scsi/big_endian.h"
#include "devices/virtio/scsi/controller.h"

namespace mvmm::bench {
namespace {

namespace vt = devices::virtio::testing;
namespace scsi = devices::virtio::scsi;
using Bytes = std::vector<uint8_t>;

constexpr uint64_t kBlock = 512;
constexpr uint64_t kPage = 4096;
constexpr uint8_t kGood = 0x00, kCheckCondition = 0x02;
constexpr uint8_t kIllegalRequest = 0x5, kUnitAttention = 0x6, kMiscompare = 0xe;
constexpr uint8_t kPending = 0xff;
constexpr uint16_t kNoDisk = 7;  // a LUN number without a disk
constexpr uint64_t kCdbAt = offsetof(virtio_scsi_cmd_req, cdb);
constexpr uint64_t kStatusAt = offsetof(virtio_scsi_cmd_resp, status);
constexpr uint64_t kResponseAt = offsetof(virtio_scsi_cmd_resp, response);
constexpr uint64_t kSenseAt = offsetof(virtio_scsi_cmd_resp, sense);

struct Command {
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
struct Control {
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

// The 8-byte LUN field addressing `lun` of target 0 (peripheral addressing below 256).
void address(uint8_t* field, uint16_t lun, bool other_target = false) {
    field[0] = 1;
    field[1] = other_target ? 1 : 0;
    field[2] = static_cast<uint8_t>(lun >> 8);
    field[3] = static_cast<uint8_t>(lun);
}

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
    Bytes block(kBlock);
    for (uint64_t at = 0; at < kBlock; at += 8) {
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

Command read(uint64_t bytes) {
    Bytes cdb{0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    scsi::store_be(cdb, 7, bytes / kBlock, 2);
    return {.name = "READ(10)", .cdb = cdb, .transfer = bytes};
}

// Every command this target serves, with 4 KiB transfers, and the ones it refuses.
std::vector<Command> mixed_commands(uint64_t image_bytes) {
    const uint64_t scratch = (image_bytes - kScratchBytes) / kBlock;
    const uint64_t blocks = image_bytes / kBlock;
    const auto last = static_cast<uint8_t>(blocks - 1);
    Command write10 = read(kPage);
    write10.name = "WRITE(10)";
    write10.cdb[0] = 0x2a;
    write10.write = true;
    Bytes write_same10{0x41, 0, 0, 0, 0, 0, 0, 0, 16, 0};
    scsi::store_be(write_same10, 2, scratch + 1536, 4);
    std::vector<Command> commands{
        read(kPage),
        write10,
        {.name = "READ(16)", .cdb = cdb16(0x88, 0, 0, 8), .transfer = kPage, .lba_bytes = 8},
        {.name = "WRITE(16) FUA",
         .cdb = cdb16(0x8a, 0x08, 0, 8),
         .transfer = kPage,
         .lba_bytes = 8,
         .write = true},
        {.name = "SYNCHRONIZE CACHE(10)", .cdb = {0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
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
        {.name = "UNMAP",
         .cdb = {0x42, 0, 0, 0, 0, 0, 0, 0, 40, 0},
         .out = unmap_list({{scratch, 8}, {scratch + 64, 16}})},
        {.name = "WRITE SAME(16) UNMAP",
         .cdb = cdb16(0x93, 0x08, scratch + 8, 8),
         .out = Bytes(kBlock, 0)},
        // tmpfs has no FALLOC_FL_ZERO_RANGE: the device writes these zeroes itself.
        {.name = "WRITE SAME(16) NDOB", .cdb = cdb16(0x93, 0x01, scratch + 512, 256)},
        {.name = "WRITE SAME(16), a pattern",
         .cdb = cdb16(0x93, 0, scratch + 1024, 64),
         .out = Bytes(kBlock, 0xa5)},
        {.name = "WRITE SAME(10), a pattern", .cdb = write_same10, .out = Bytes(kBlock, 0x5a)},
        {.name = "UNMAP without a parameter list", .cdb = {0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {.name = "VERIFY(10), medium only", .cdb = {0x2f, 0, 0, 0, 0, 0, 0, 0, 8, 0}},
        {.name = "VERIFY(16), medium only", .cdb = cdb16(0x8f, 0, 0, 8)},
        {.name = "VERIFY(10), compared",
         .cdb = {0x2f, 0x02, 0, 0, 0, 0, 0, 0, 1, 0},
         .out = first_block()},
        {.name = "VERIFY(16), a miscompare",
         .cdb = cdb16(0x8f, 0x02, 0, 1),
         .out = Bytes(kBlock, 0xff),
         .status = kCheckCondition,
         .sense_key = kMiscompare},
        {.name = "MODE SELECT(6), caching",
         .cdb = {0x15, 0x10, 0, 0, 24, 0},
         .out = caching_page_parameters(false)},
        {.name = "MODE SELECT(10), caching",
         .cdb = {0x55, 0x10, 0, 0, 0, 0, 0, 0, 28, 0},
         .out = caching_page_parameters(true)},
        {.name = "MODE SENSE(10), changeable caching",
         .cdb = {0x5a, 0x08, 0x48, 0, 0, 0, 0, 0, 255, 0},
         .in = 255,
         .answer = {{8, 0x08}, {10, 0x04}}},
        {.name = "REPORT SUPPORTED OPERATION CODES, all",
         .cdb = {0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0},
         .in = 1024},
        {.name = "REPORT SUPPORTED OPERATION CODES, READ(10)",
         .cdb = {0xa3, 0x0c, 0x01, 0x28, 0, 0, 0, 0, 0, 32, 0, 0},
         .in = 32,
         .answer = {{1, 0x03}, {3, 10}}},
        {.name = "an unknown opcode",
         .cdb = {0xff, 0, 0, 0, 0, 0},
         .status = kCheckCondition,
         .sense_key = kIllegalRequest},
        {.name = "READ(16) past the end",
         .cdb = cdb16(0x88, 0, blocks, 1),
         .in = kBlock,
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
         .in = kBlock,
         .response = VIRTIO_SCSI_S_OVERRUN},
        {.name = "another target",
         .cdb = {0x00, 0, 0, 0, 0, 0},
         .response = VIRTIO_SCSI_S_BAD_TARGET,
         .other_target = true},
    };
    for (uint8_t page : scsi::kVpdPages) {
        commands.push_back({.name = "INQUIRY, a VPD page",
                            .cdb = {0x12, 1, page, 0, 255, 0},
                            .in = 255,
                            .answer = {{1, page}}});
    }
    return commands;
}

Control tmf(const char* name, uint32_t subtype, uint16_t lun, uint8_t expected) {
    virtio_scsi_ctrl_tmf_req request{};
    request.type = VIRTIO_SCSI_T_TMF;
    request.subtype = subtype;
    address(request.lun, lun);
    return {name, bytes_of(request), sizeof(virtio_scsi_ctrl_tmf_resp),
            offsetof(virtio_scsi_ctrl_tmf_resp, response), expected};
}

std::vector<Control> control_requests() {
    virtio_scsi_ctrl_an_req query{};
    query.type = VIRTIO_SCSI_T_AN_QUERY;
    address(query.lun, 0);
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

[[noreturn]] void wrong(const char* name, const std::string& what) {
    throw std::runtime_error(std::string("virtio-scsi ") + name + ": " + what);
}

class ScsiRequests final : public DriverRequests {
  public:
    ScsiRequests(Workload workload, uint64_t image_bytes)
        : workload_(workload),
          commands_(
              workload == Workload::mixed
                  ? mixed_commands(image_bytes)
                  : std::vector<Command>{read(workload == Workload::rand4k ? kPage : 16 * kPage)}),
          controls_(workload == Workload::mixed ? control_requests() : std::vector<Control>{}) {}

    Device device(const std::string& image, SlotSource request_alloc, uint16_t request_queues,
                  boost::asio::io_context& io) const override {
        scsi::ControllerConfig config{
            .id = "bench",
            .request_queues = request_queues,
            .luns = {{image, 0, workload_ != Workload::mixed, "request-bench"}},
            .request_alloc = request_alloc};
        auto controller = std::make_unique<scsi::ScsiController>(config, io);
        const auto* counters = &controller->counters();
        return {std::move(controller), counters};
    }
    uint16_t device_queues(uint16_t request_queues) const override {
        return scsi::ScsiController::kFirstRequestQueue + request_queues;
    }
    std::vector<uint16_t> loaded_queues(uint16_t request_queues) const override {
        std::vector<uint16_t> queues;
        if (!controls_.empty()) queues.push_back(scsi::ScsiController::kControlQueue);
        for (uint16_t q = 0; q < request_queues; ++q)
            queues.push_back(scsi::ScsiController::kFirstRequestQueue + q);
        return queues;
    }
    // The control queue has a thread of its own (a TMF waits there for the request queues),
    // whose counters the device's statistics do not include yet.
    bool on_io_threads(uint16_t queue) const override {
        return queue != scsi::ScsiController::kControlQueue;
    }
    size_t kinds(uint16_t queue) const override {
        return queue == scsi::ScsiController::kControlQueue ? controls_.size() : commands_.size();
    }

    std::vector<vt::Desc> lay_out(vt::TestGuest& guest, RequestSlot& slot) const override {
        std::vector<vt::Desc> table;
        auto add = [&](GuestAddr at, uint64_t bytes, bool writable) {
            if (!table.empty()) {
                table.back().flags |= vt::kDescNext;
                table.back().next = uint16_t(table.size());
            }
            table.push_back(
                {at.value(), uint32_t(bytes), writable ? vt::kDescWrite : uint16_t(0), 0});
        };
        auto add_new = [&](const Bytes& bytes) {
            const GuestAddr at = guest.alloc(bytes.size());
            guest.write(at, bytes);
            add(at, bytes.size(), false);
            return at;
        };
        if (slot.queue == scsi::ScsiController::kControlQueue) {
            const Control& control = controls_[slot.kind];
            slot.header = add_new(control.request);
            slot.response = guest.alloc(control.response_bytes);
            add(slot.response, control.response_bytes, true);
            return table;
        }
        const Command& command = commands_[slot.kind];
        slot.transfer_bytes = command.transfer;
        virtio_scsi_cmd_req request{};
        address(request.lun, command.lun, command.other_target);
        std::copy(command.cdb.begin(), command.cdb.end(), request.cdb);
        slot.header = add_new(bytes_of(request));
        if (command.transfer) slot.data = guest.alloc(command.transfer, kPage);
        if (command.transfer && command.write) {
            for (uint64_t page = 0; page < command.transfer / kPage; ++page)
                add(slot.data + page * kPage, kPage, false);
        }
        if (!command.out.empty()) slot.data = add_new(command.out);
        slot.response = guest.alloc(sizeof(virtio_scsi_cmd_resp));
        add(slot.response, sizeof(virtio_scsi_cmd_resp), true);
        if (command.transfer && !command.write) {
            for (uint64_t page = 0; page < command.transfer / kPage; ++page)
                add(slot.data + page * kPage, kPage, true);
        }
        if (command.in) {
            slot.data = guest.alloc(command.in);
            add(slot.data, command.in, true);
        }
        return table;
    }

    void prepare(const vt::TestGuest& guest, const RequestSlot& slot) const override {
        if (slot.queue == scsi::ScsiController::kControlQueue) {
            const Control& control = controls_[slot.kind];
            guest.write(slot.response + control.at, std::span(&kPending, 1));
            return;
        }
        const Command& command = commands_[slot.kind];
        if (command.transfer) {
            uint8_t lba[8];
            scsi::store_be(lba, 0, slot.offset / kBlock, command.lba_bytes);
            guest.write(slot.header + kCdbAt + 2, std::span(lba, command.lba_bytes));
            if (command.write) fill_pattern(guest, slot.data, command.transfer, slot.offset);
        }
        const uint8_t pending[] = {kPending, kPending};  // status, response
        guest.write(slot.response + kStatusAt, pending);
    }

    void check(const vt::TestGuest& guest, const RequestSlot& slot,
               bool every_word) const override {
        const auto byte = [&](GuestAddr at) { return guest.memory().read<uint8_t>(at).value(); };
        if (slot.queue == scsi::ScsiController::kControlQueue) {
            const Control& control = controls_[slot.kind];
            const uint8_t response = byte(slot.response + control.at);
            if (response != control.expected)
                wrong(control.name, "response " + std::to_string(response));
            return;
        }
        const Command& command = commands_[slot.kind];
        const uint8_t response = byte(slot.response + kResponseAt);
        // The control load's LUN resets and aborts (tag 0 is every command's) cancel the
        // commands queued before them, and a reset leaves a unit attention that the next
        // command reports instead of running, as the first one after power on does: answers
        // the target gives, with nothing to check.
        if (response == VIRTIO_SCSI_S_RESET || response == VIRTIO_SCSI_S_ABORTED) return;
        if (response == VIRTIO_SCSI_S_OK && byte(slot.response + kStatusAt) == kCheckCondition &&
            (byte(slot.response + kSenseAt + 2) & 0xf) == kUnitAttention)
            return;
        if (response != command.response)
            wrong(command.name, "response " + std::to_string(response));
        if (response != VIRTIO_SCSI_S_OK) return;
        const uint8_t status = byte(slot.response + kStatusAt);
        if (status != command.status) wrong(command.name, "status " + std::to_string(status));
        if (status == kCheckCondition &&
            (byte(slot.response + kSenseAt + 2) & 0xf) != command.sense_key)
            wrong(command.name, "another sense key");
        if (command.transfer && !command.write)
            check_pattern(guest, slot.data, command.transfer, slot.offset, every_word,
                          "virtio-scsi READ");
        for (const auto& [at, expected] : command.answer) {
            if (byte(slot.data + at) != expected)
                wrong(command.name, "data-in byte " + std::to_string(at) + " is " +
                                        std::to_string(byte(slot.data + at)));
        }
    }

  private:
    const Workload workload_;
    const std::vector<Command> commands_;
    const std::vector<Control> controls_;
};

}  // namespace

std::unique_ptr<const DriverRequests> scsi_requests(Workload workload, uint64_t image_bytes) {
    return std::make_unique<ScsiRequests>(workload, image_bytes);
}

}  // namespace mvmm::bench
