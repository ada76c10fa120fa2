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
#include "bench/scsi_commands.h"
#include "devices/virtio/scsi/big_endian.h"
#include "devices/virtio/scsi/controller.h"

namespace mvmm::bench {
namespace {

namespace vt = devices::virtio::testing;
namespace scsi = devices::virtio::scsi;
constexpr uint64_t kPage = 4096;
constexpr uint8_t kPending = 0xff;
constexpr uint64_t kCdbAt = offsetof(virtio_scsi_cmd_req, cdb);
constexpr uint64_t kStatusAt = offsetof(virtio_scsi_cmd_resp, status);
constexpr uint64_t kResponseAt = offsetof(virtio_scsi_cmd_resp, response);
constexpr uint64_t kSenseAt = offsetof(virtio_scsi_cmd_resp, sense);

[[noreturn]] void wrong(const char* name, const std::string& what) {
    throw std::runtime_error(std::string("virtio-scsi ") + name + ": " + what);
}

class ScsiRequests final : public DriverRequests {
  public:
    ScsiRequests(Workload workload, uint64_t image_bytes)
        : workload_(workload),
          commands_(workload == Workload::mixed
                        ? mixed_commands(image_bytes)
                        : std::vector<ScsiCommand>{scsi_read(
                              workload == Workload::rand4k ? kPage : 16 * kPage)}),
          controls_(workload == Workload::mixed ? control_requests() : std::vector<ScsiControl>{}) {
    }

    Device device(const std::string& image, SlotSource request_alloc, uint16_t request_queues,
                  const BlkIo& /*a LUN has none*/, boost::asio::io_context& io) const override {
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
            const ScsiControl& control = controls_[slot.kind];
            slot.header = add_new(control.request);
            slot.response = guest.alloc(control.response_bytes);
            add(slot.response, control.response_bytes, true);
            return table;
        }
        const ScsiCommand& command = commands_[slot.kind];
        slot.transfer_bytes = command.transfer;
        virtio_scsi_cmd_req request{};
        address_lun(request.lun, command.lun, command.other_target);
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
            const ScsiControl& control = controls_[slot.kind];
            guest.write(slot.response + control.at, std::span(&kPending, 1));
            return;
        }
        const ScsiCommand& command = commands_[slot.kind];
        if (command.transfer) {
            uint8_t lba[8];
            scsi::store_be(lba, 0, slot.offset / kScsiBlock, command.lba_bytes);
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
            const ScsiControl& control = controls_[slot.kind];
            const uint8_t response = byte(slot.response + control.at);
            if (response != control.expected)
                wrong(control.name, "response " + std::to_string(response));
            return;
        }
        const ScsiCommand& command = commands_[slot.kind];
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
    const std::vector<ScsiCommand> commands_;
    const std::vector<ScsiControl> controls_;
};

}  // namespace

std::unique_ptr<const DriverRequests> scsi_requests(Workload workload, uint64_t image_bytes) {
    return std::make_unique<ScsiRequests>(workload, image_bytes);
}

}  // namespace mvmm::bench
