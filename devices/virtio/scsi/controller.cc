#include "devices/virtio/scsi/controller.h"

#include <linux/virtio_scsi.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <system_error>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint32_t kMaxSectors = 0xffff;  // per command, in 512-byte sectors (what QEMU says)
constexpr uint32_t kCommandsPerLun = 128;
constexpr uint64_t kFeatureHotplug = 1ull << VIRTIO_SCSI_F_HOTPLUG;

uint16_t checked_queues(uint16_t queues) {
    if (queues < 1 || queues > kMaxRequestQueues)
        throw std::invalid_argument("virtio-scsi: queues must be 1 to " +
                                    std::to_string(kMaxRequestQueues));
    return queues;
}

// The highest target of the LUNs given, or of the targets reserved for LUNs added later.
uint8_t highest_target(const ControllerConfig& config) {
    uint8_t highest = config.targets > 0 ? uint8_t(std::min<uint16_t>(config.targets, 256) - 1) : 0;
    for (const LunConfig& lun : config.luns) highest = std::max(highest, lun.target);
    return highest;
}

// Groups the LUNs by target: a Target each, indexed by its number.
Targets make_targets(const std::vector<LunConfig>& luns) {
    std::vector<std::vector<LunConfig>> by_target;
    for (const LunConfig& lun : luns) {
        if (lun.target >= by_target.size()) by_target.resize(lun.target + 1u);
        by_target[lun.target].push_back(lun);
    }
    Targets targets(by_target.size());
    for (size_t i = 0; i < by_target.size(); ++i) {
        if (!by_target[i].empty()) targets[i] = std::make_shared<const Target>(by_target[i]);
    }
    return targets;
}

}  // namespace

ScsiController::ScsiController(const ControllerConfig& config, boost::asio::io_context& io)
    : request_queues_(checked_queues(config.request_queues)),
      queue_size_(checked_queue_size(config.queue_size, "virtio-scsi")),
      targets_(make_targets(config.luns)),
      max_target_(highest_target(config)),
      tasks_(request_queues_),
      control_(targets_, tasks_, counters_.bad_requests),
      cdb_size_(VIRTIO_SCSI_CDB_DEFAULT_SIZE),
      sense_size_(VIRTIO_SCSI_SENSE_DEFAULT_SIZE),
      workers_(io, "virtio-scsi " + config.id, counters_, config.request_alloc),
      control_work_(control_io_.get_executor()),
      control_thread_([this] { control_io_.run(); }),
      control_workers_(control_io_, "virtio-scsi " + config.id + " control", control_counters_,
                       config.request_alloc) {
    for (uint16_t i = 0; i < request_queues_; ++i)
        commands_.push_back(
            std::make_unique<CommandQueue>(i, queue_size_, targets_, tasks_, counters_));
}

ScsiController::~ScsiController() {
    stop_queues();
    control_work_.reset();
    control_io_.stop();
}

void ScsiController::stop_queues() {
    // The request queues first: a TMF waiting for them is woken when they have stopped.  The
    // event queue's buffers never complete by themselves: they go back empty.
    events_.release();
    workers_.stop();
    tasks_.stop();
    control_workers_.stop();
}

std::shared_ptr<const Target> ScsiController::target(uint8_t number) const {
    const auto targets = targets_.load();
    return number < targets->size() ? (*targets)[number] : nullptr;
}

void ScsiController::for_each_lun(
    const std::function<void(uint8_t target, uint16_t lun, Lun& disk)>& visit) const {
    const auto targets = targets_.load();
    for (size_t t = 0; t < targets->size(); ++t) {
        const Target* target = (*targets)[t].get();
        if (!target) continue;
        for (const uint16_t lun : target->lun_numbers())
            visit(static_cast<uint8_t>(t), lun, *target->find(lun));
    }
}

void ScsiController::check_target(uint8_t target_number, uint16_t lun_number) const {
    if (target_number > max_target_)
        throw std::invalid_argument(
            "target " + std::to_string(target_number) + " LUN " + std::to_string(lun_number) +
            ": the controller's targets are 0 to " + std::to_string(max_target_) +
            " (max_target is fixed when the VM starts: targets= on --scsi-controller reserves "
            "more)");
}

void ScsiController::add_lun(const LunConfig& config) {
    check_target(config.target, config.lun);  // before the image is opened
    add_lun(config.target, config.lun, std::make_shared<Lun>(config));
}

void ScsiController::add_lun(uint8_t target_number, uint16_t lun_number,
                             std::shared_ptr<Lun> disk) {
    check_target(target_number, lun_number);
    std::lock_guard lock(changes_);
    Targets next = *targets_.load();
    if (target_number >= next.size()) next.resize(target_number + 1u);
    const Target none{std::vector<LunConfig>{}};
    const Target& old = next[target_number] ? *next[target_number] : none;
    if (old.find(lun_number))
        throw std::invalid_argument("target " + std::to_string(target_number) + " LUN " +
                                    std::to_string(lun_number) + " is present already");
    next[target_number] = std::make_shared<const Target>(old.with_lun(lun_number, std::move(disk)));
    publish_change(std::move(next), target_number, lun_number, VIRTIO_SCSI_EVT_RESET_RESCAN);
}

std::weak_ptr<const void> ScsiController::remove_lun(uint8_t target_number, uint16_t lun_number) {
    std::lock_guard lock(changes_);
    Targets next = *targets_.load();
    const Target* old = find_target(next, target_number);
    if (!old || !old->find(lun_number))
        throw std::invalid_argument("virtio-scsi: no LUN " + std::to_string(lun_number) +
                                    " on target " + std::to_string(target_number));
    const std::shared_ptr<Lun> held = old->share(lun_number);
    std::weak_ptr<const void> removed = held->image_open();
    Target remaining = old->without_lun(lun_number);
    // A target with no LUN left is gone: BAD_TARGET, as one that never had any.
    next[target_number] =
        remaining.empty() ? nullptr : std::make_shared<const Target>(std::move(remaining));
    publish_change(std::move(next), target_number, lun_number, VIRTIO_SCSI_EVT_RESET_REMOVED);
    // No command holds it: it closes here as `held` goes, before the caller hears it is
    // removed, so that its file may be used again at once.  Else closer_ closes it after them.
    if (held.use_count() > 1) held->close_on(closer_);
    return removed;
}

void ScsiController::publish_change(Targets next, uint8_t target_number, uint16_t lun_number,
                                    uint32_t reason) {
    const std::shared_ptr<const Target> changed = next[target_number];
    targets_.publish(std::move(next));
    // SAM-5, 5.14: the target's other LUNs report REPORTED LUNS DATA HAS CHANGED.
    if (changed) changed->report_luns_changed(lun_number);
    // Without HOTPLUG the driver learns of the change only from that unit attention.
    if (hotplug_.load()) events_.transport_reset(target_number, lun_number, reason);
}

uint64_t ScsiController::reread_capacity(uint8_t target_number, uint16_t lun_number) {
    const auto found = target(target_number);
    Lun* lun = found ? found->find(lun_number) : nullptr;
    if (!lun)
        throw std::invalid_argument("virtio-scsi: no LUN " + std::to_string(lun_number) +
                                    " on target " + std::to_string(target_number));
    return lun->reread_capacity();
}

uint64_t ScsiController::features() const {
    // HOTPLUG: LUNs added and removed are events (events.h).  No CHANGE: no parameter changes
    // are reported as events.
    return kFeatureVersion1 | kFeatureIndirectDesc | kFeatureEventIdx | kFeatureHotplug;
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
    // Up to the highest target given: Linux scans each target below it, and finds every LUN
    // of one with a REPORT LUNS.  Fixed while the VM runs: hot-added LUNs stay below it.
    config.max_target = max_target_;
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
    stop_queues();
    const Layout layout{.cdb_size = cdb_size_.load(), .sense_size = sense_size_.load()};
    try {
        for (auto& commands : commands_) commands->activate(layout);
    } catch (const std::system_error& e) {
        spdlog::error("virtio-scsi: cannot set up the LUNs' I/O queues: {}", e.what());
        return false;
    }
    const auto request_rings =
        std::span(context.queues)
            .subspan(std::min<size_t>(context.queues.size(), kFirstRequestQueue));
    if (!tasks_.activate(context.memory, request_rings)) {
        spdlog::error("virtio-scsi: a request queue's ring is outside guest RAM");
        return false;
    }
    hotplug_.store((context.features & kFeatureHotplug) != 0);
    events_.resume();
    const auto request_handler = [this](uint16_t i) -> AsyncRequestHandler* {
        if (i == kEventQueue) return &events_;
        if (i < kFirstRequestQueue) return nullptr;  // the control queue has its own thread
        return commands_[i - kFirstRequestQueue].get();
    };
    const auto control_handler = [this](uint16_t i) -> RequestHandler* {
        return i == kControlQueue ? &control_ : nullptr;
    };
    if (!workers_.start(context, num_queues(), queue_size_, request_handler)) return false;
    if (control_workers_.start(context, num_queues(), queue_size_, control_handler)) return true;
    workers_.stop();
    return false;
}

void ScsiController::reset() {
    stop_queues();
    // Like a bus reset: every LUN reports it to the guest's next command.  The driver scans
    // again after a reset: pending events are stale.
    for (const auto& target : *targets_.load()) {
        if (target) target->reset();
    }
    events_.clear();
    hotplug_.store(false);
    counters_.needs_reset.store(false);
    control_counters_.needs_reset.store(false);
    // virtio 1.2, 5.6.4: a reset restores sense_size and cdb_size to their defaults.
    cdb_size_.store(VIRTIO_SCSI_CDB_DEFAULT_SIZE);
    sense_size_.store(VIRTIO_SCSI_SENSE_DEFAULT_SIZE);
}

}  // namespace mvmm::devices::virtio::scsi
