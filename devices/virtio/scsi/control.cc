#include "devices/virtio/scsi/control.h"

#include <linux/virtio_scsi.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstring>
#include <mutex>

#include "devices/virtio/scsi/request.h"

namespace mvmm::devices::virtio::scsi {
namespace {

template <class T>
std::span<uint8_t> bytes_of(T& value) {
    return {reinterpret_cast<uint8_t*>(&value), sizeof value};
}

// virtio 1.2, 5.6.6.2: FUNCTION COMPLETE is 0, like OK (older uapi headers lack the name).
constexpr uint8_t kFunctionComplete = VIRTIO_SCSI_S_OK;

// What a task management function answers once no command is in flight.
uint8_t tmf_response(uint32_t subtype, bool target_exists, bool lun_exists) {
    if (!target_exists) return VIRTIO_SCSI_S_BAD_TARGET;
    switch (subtype) {
        case VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET:
            return kFunctionComplete;  // the target's, not a LUN's
        case VIRTIO_SCSI_T_TMF_ABORT_TASK:
        case VIRTIO_SCSI_T_TMF_ABORT_TASK_SET:
        case VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET:
        case VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET:
        case VIRTIO_SCSI_T_TMF_QUERY_TASK:  // complete: the task is not in the task set
        case VIRTIO_SCSI_T_TMF_QUERY_TASK_SET:
            return lun_exists ? kFunctionComplete : VIRTIO_SCSI_S_INCORRECT_LUN;
        default:  // CLEAR ACA (no ACA here) and unknown functions
            return VIRTIO_SCSI_S_FUNCTION_REJECTED;
    }
}

}  // namespace

ControlHandler::ControlHandler(const Target& target, std::shared_mutex& in_flight,
                               std::atomic<uint64_t>& bad_requests)
    : target_(target), in_flight_(in_flight), bad_requests_(bad_requests) {}

uint32_t ControlHandler::handle(const DescriptorChain& chain) {
    uint32_t type = 0;
    if (chain.readable.copy_to(0, bytes_of(type)) != sizeof type) return bad_request();
    switch (type) {
        case VIRTIO_SCSI_T_TMF:
            return task_management(chain);
        case VIRTIO_SCSI_T_AN_QUERY:
        case VIRTIO_SCSI_T_AN_SUBSCRIBE:
            return async_notification(chain);
        default:
            return bad_request();
    }
}

uint32_t ControlHandler::task_management(const DescriptorChain& chain) {
    virtio_scsi_ctrl_tmf_req request{};
    virtio_scsi_ctrl_tmf_resp response{};
    if (chain.readable.copy_to(0, bytes_of(request)) != sizeof request ||
        chain.writable.size() < sizeof response)
        return bad_request();
    ++tmfs_;
    std::array<uint8_t, 8> address;
    std::memcpy(address.data(), request.lun, address.size());  // out of the packed struct
    const auto lun = lun_number(address);
    { std::unique_lock wait_for_commands(in_flight_); }
    const uint32_t subtype = request.subtype;
    response.response = tmf_response(subtype, lun.has_value(), lun && target_.find(*lun));
    spdlog::debug("virtio-scsi: task management function {} on LUN {}: response {}", subtype,
                  lun ? int(*lun) : -1, int(response.response));
    chain.writable.copy_from(0, bytes_of(response));
    return sizeof response;
}

uint32_t ControlHandler::async_notification(const DescriptorChain& chain) {
    virtio_scsi_ctrl_an_req request{};
    virtio_scsi_ctrl_an_resp response{};
    if (chain.readable.copy_to(0, bytes_of(request)) != sizeof request ||
        chain.writable.size() < sizeof response)
        return bad_request();
    response.event_actual = 0;  // none of the requested events is supported
    response.response = VIRTIO_SCSI_S_OK;
    chain.writable.copy_from(0, bytes_of(response));
    return sizeof response;
}

uint32_t ControlHandler::bad_request() {
    ++bad_requests_;
    return 0;
}

}  // namespace mvmm::devices::virtio::scsi
