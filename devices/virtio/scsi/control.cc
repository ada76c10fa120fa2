#include "devices/virtio/scsi/control.h"

#include <linux/virtio_scsi.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cstring>

#include "devices/virtio/scsi/request.h"

namespace mvmm::devices::virtio::scsi {
namespace {

template <class T>
std::span<uint8_t> bytes_of(T& value) {
    return {reinterpret_cast<uint8_t*>(&value), sizeof value};
}

// virtio 1.2, 5.6.6.2: FUNCTION COMPLETE is 0, like OK (older uapi headers lack the name).
constexpr uint8_t kFunctionComplete = VIRTIO_SCSI_S_OK;

}  // namespace

ControlHandler::ControlHandler(const TargetTable& targets, TaskSet& tasks,
                               std::atomic<uint64_t>& bad_requests)
    : targets_(targets), tasks_(tasks), bad_requests_(bad_requests) {}

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
    const uint32_t subtype = request.subtype;
    const auto lun = lun_address(address);
    response.response = carry_out(subtype, lun, request.tag);
    spdlog::debug("virtio-scsi: task management function {} on target {} LUN {}: response {}",
                  subtype, lun ? int(lun->target) : -1, lun ? int(lun->lun) : -1,
                  int(response.response));
    chain.writable.copy_from(0, bytes_of(response));
    return sizeof response;
}

// What a task management function does, and answers once the commands queued before it are
// complete.
uint8_t ControlHandler::carry_out(uint32_t subtype, const std::optional<LunAddress>& lun,
                                  uint64_t tag) {
    const auto targets = targets_.load();  // held until the function completes
    const Target* target = lun ? find_target(*targets, lun->target) : nullptr;
    if (!target) return VIRTIO_SCSI_S_BAD_TARGET;
    const TaskScope task{TaskScope::Task, lun->target, lun->lun, tag};
    const TaskScope unit{TaskScope::LogicalUnit, lun->target, lun->lun, 0};
    if (subtype == VIRTIO_SCSI_T_TMF_I_T_NEXUS_RESET) {  // the target's, not a LUN's
        tasks_.apply({TaskScope::Target, lun->target, 0, 0}, TaskAction::Reset);
        target->reset();
        return kFunctionComplete;
    }
    Lun* disk = target->find(lun->lun);
    const bool known =
        subtype <= VIRTIO_SCSI_T_TMF_QUERY_TASK_SET && subtype != VIRTIO_SCSI_T_TMF_CLEAR_ACA;
    if (!known) return VIRTIO_SCSI_S_FUNCTION_REJECTED;  // CLEAR ACA (no ACA here), unknown
    if (!disk) return VIRTIO_SCSI_S_INCORRECT_LUN;
    switch (subtype) {
        case VIRTIO_SCSI_T_TMF_ABORT_TASK:
            tasks_.apply(task, TaskAction::Abort);
            return kFunctionComplete;
        case VIRTIO_SCSI_T_TMF_ABORT_TASK_SET:
        case VIRTIO_SCSI_T_TMF_CLEAR_TASK_SET:
            tasks_.apply(unit, TaskAction::Abort);
            return kFunctionComplete;
        case VIRTIO_SCSI_T_TMF_LOGICAL_UNIT_RESET:
            tasks_.apply(unit, TaskAction::Reset);
            disk->reset();
            return kFunctionComplete;
        case VIRTIO_SCSI_T_TMF_QUERY_TASK:
            return tasks_.apply(task, TaskAction::Run) ? VIRTIO_SCSI_S_FUNCTION_SUCCEEDED
                                                       : kFunctionComplete;
        default:  // QUERY TASK SET
            return tasks_.apply(unit, TaskAction::Run) ? VIRTIO_SCSI_S_FUNCTION_SUCCEEDED
                                                       : kFunctionComplete;
    }
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
