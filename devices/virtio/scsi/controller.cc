#include "devices/virtio/scsi/controller.h"

#include <linux/virtio_scsi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint32_t kMaxSectors = 0xffff;  // per command, in 512-byte sectors (what QEMU says)
constexpr uint32_t kCommandsPerLun = 128;

uint16_t checked_queues(uint16_t queues) {
    if (queues < 1 || queues > kMaxRequestQueues)
        throw std::invalid_argument("virtio-scsi: queues must be 1 to " +
                                    std::to_string(kMaxRequestQueues));
    return queues;
}

// The part of the buffers the command did not move.
uint32_t residual(const CommandRequest& request, uint64_t transferred) {
    const uint64_t size =
        request.data_in.empty() ? request.data_out.size() : request.data_in.size();
    return static_cast<uint32_t>(size - std::min(size, transferred));  // chains are < 4 GiB
}

}  // namespace

uint32_t ScsiController::Commands::handle(const DescriptorChain& chain) {
    auto request = parse_command(chain, layout);
    if (!request) {
        ++counters_.bad_requests;
        spdlog::debug("virtio-scsi: bad request: {}", to_string(request.error()));
        return write_failure(chain);
    }
    const auto lun = lun_number(request->lun);
    if (!lun) {
        ++counters_.bad_targets;
        return write_response(*request, layout,
                              {.response = VIRTIO_SCSI_S_BAD_TARGET, .sense = {}, .residual = 0},
                              0);
    }
    TargetOutcome result;
    {
        std::shared_lock running(in_flight_);
        result = target_.execute(*lun, request->cdb(), request->data_out, request->data_in);
    }
    if (result.delivery == Delivery::Overrun) {
        ++counters_.overruns;
        const CommandResponse overrun{
            .response = VIRTIO_SCSI_S_OVERRUN, .sense = {}, .residual = residual(*request, 0)};
        return write_response(*request, layout, overrun, 0);
    }
    const Outcome& outcome = result.outcome;
    if (outcome.sense) ++counters_.check_conditions;
    const CommandResponse response{.response = VIRTIO_SCSI_S_OK,
                                   .sense = outcome.sense,
                                   .residual = residual(*request, outcome.transferred)};
    return write_response(*request, layout, response,
                          request->data_in.empty() ? 0 : outcome.transferred);
}

ScsiController::ScsiController(const ControllerConfig& config, boost::asio::io_context& io)
    : request_queues_(checked_queues(config.request_queues)),
      queue_size_(checked_queue_size(config.queue_size, "virtio-scsi")),
      target_(config.luns),
      commands_(target_, in_flight_, counters_),
      control_(target_, in_flight_, counters_.bad_requests),
      cdb_size_(VIRTIO_SCSI_CDB_DEFAULT_SIZE),
      sense_size_(VIRTIO_SCSI_SENSE_DEFAULT_SIZE),
      workers_(io, "virtio-scsi " + config.id, counters_, config.request_alloc) {}

uint64_t ScsiController::features() const {
    // No HOTPLUG or CHANGE: the LUNs are fixed, so the event queue stays quiet.
    return kFeatureVersion1 | kFeatureIndirectDesc | kFeatureEventIdx;
}

std::vector<uint8_t> ScsiController::config_space() const {
    virtio_scsi_config config{};  // little-endian, like the host
    config.num_queues = request_queues_;
    config.seg_max = queue_size_ - 2u;  // a chain also holds the request and response headers
    config.max_sectors = kMaxSectors;
    config.cmd_per_lun = kCommandsPerLun;
    config.event_info_size = sizeof(virtio_scsi_event);
    config.sense_size = sense_size_.load();
    config.cdb_size = cdb_size_.load();
    config.max_channel = 0;
    // One target: Linux finds every LUN with one REPORT LUNS instead of probing 256 targets.
    config.max_target = 0;
    config.max_lun = kMaxLun;
    const auto* bytes = reinterpret_cast<const uint8_t*>(&config);
    return {bytes, bytes + sizeof config};
}

void ScsiController::read_config(uint64_t offset, std::span<uint8_t> data) const {
    read_config_space(config_space(), offset, data);
}

void ScsiController::write_config(uint64_t offset, std::span<const uint8_t> data) {
    auto config = config_space();
    if (offset >= config.size()) return;
    const size_t n = std::min<uint64_t>(data.size(), config.size() - offset);
    std::copy_n(data.begin(), n, config.begin() + static_cast<ptrdiff_t>(offset));
    auto field = [&](size_t at) {
        uint32_t value;
        std::memcpy(&value, config.data() + at, sizeof value);
        return value;
    };
    // The driver sets them before DRIVER_OK; activate() reads them.
    sense_size_.store(field(offsetof(virtio_scsi_config, sense_size)));
    cdb_size_.store(field(offsetof(virtio_scsi_config, cdb_size)));
}

bool ScsiController::activate(ActivateContext context) {
    workers_.stop();
    commands_.layout = {.cdb_size = cdb_size_.load(), .sense_size = sense_size_.load()};
    const auto handler_for = [this](uint16_t i) -> RequestHandler* {
        if (i == kControlQueue) return &control_;
        if (i == kEventQueue) return nullptr;  // no events: the driver's buffers wait here
        return &commands_;
    };
    return workers_.start(context, num_queues(), queue_size_, handler_for);
}

void ScsiController::reset() {
    workers_.stop();
    counters_.needs_reset.store(false);
    // virtio 1.2, 5.6.4: a reset restores sense_size and cdb_size to their defaults.
    cdb_size_.store(VIRTIO_SCSI_CDB_DEFAULT_SIZE);
    sense_size_.store(VIRTIO_SCSI_SENSE_DEFAULT_SIZE);
}

}  // namespace mvmm::devices::virtio::scsi
