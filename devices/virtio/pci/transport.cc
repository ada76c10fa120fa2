#include "devices/virtio/pci/transport.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <spdlog/spdlog.h>

namespace mvmm::devices::virtio::pci {

namespace {

constexpr uint8_t kIsrQueue = 1;
constexpr uint8_t kIsrConfig = 2;

// The 32-bit half `select` (0 or 1) of a 64-bit feature word; other selects read 0.
uint32_t feature_word(uint64_t features, uint32_t select) {
    return select < 2 ? static_cast<uint32_t>(features >> (32 * select)) : 0;
}

// Whether the write of `n` bytes at `offset` touches the field of `size` bytes at `at`.
bool touches(uint64_t offset, uint64_t n, size_t at, size_t size) {
    return offset < at + size && at < offset + n;
}

}  // namespace

Transport::Transport(Device& device, const GuestMemory& memory, devices::pci::MsixTable& msix)
    : device_(device),
      memory_(memory),
      msix_(msix),
      // The transport is modern-only: VERSION_1 is its bit to offer.
      offered_features_(device.features() | kFeatureVersion1),
      queues_(device.num_queues(), Queue{.size = device.max_queue_size()}),
      queue_vectors_(device.num_queues()) {
    kicks_.reserve(queues_.size());
    for (size_t i = 0; i < queues_.size(); ++i) kicks_.emplace_back();
    for (auto& v : queue_vectors_) v.store(kNoVector);
}

CommonConfig Transport::snapshot() const {
    CommonConfig c{};
    c.device_feature_select = device_feature_select_;
    c.device_feature = feature_word(offered_features_, device_feature_select_);
    c.driver_feature_select = driver_feature_select_;
    c.driver_feature = feature_word(driver_features_, driver_feature_select_);
    c.config_msix_vector = config_vector_.load();
    c.num_queues = num_queues();
    c.device_status = device_status();
    c.config_generation = config_generation_.load();
    c.queue_select = queue_select_;
    if (queue_select_ < num_queues()) {
        const Queue& q = queues_[queue_select_];
        c.queue_size = q.size;
        c.queue_msix_vector = queue_vectors_[queue_select_].load();
        c.queue_enable = q.enabled;
        c.queue_notify_off = queue_select_;  // notify address = base + index * multiplier
        c.queue_desc = q.desc;
        c.queue_driver = q.driver;
        c.queue_device = q.device;
    }
    return c;
}

uint8_t Transport::device_status() const {
    // After a reset the driver polls for 0; a device stuck in NEEDS_RESET must not hang it.
    if (driver_status_ == 0) return 0;
    const bool needs_reset = needs_reset_.load() || device_.needs_reset();
    return driver_status_ | (needs_reset ? status::kNeedsReset : 0);
}

void Transport::read_common(uint64_t offset, std::span<uint8_t> data) {
    std::ranges::fill(data, 0);
    std::lock_guard lock(mutex_);
    if (offset >= sizeof(CommonConfig)) return;
    const CommonConfig c = snapshot();
    const auto n = std::min<uint64_t>(data.size(), sizeof c - offset);
    std::memcpy(data.data(), reinterpret_cast<const uint8_t*>(&c) + offset, n);
}

void Transport::write_common(uint64_t offset, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    if (offset >= sizeof(CommonConfig)) return;
    // Apply the bytes to a copy of the registers, then act on every field they touched.
    CommonConfig w = snapshot();
    const auto n = std::min<uint64_t>(data.size(), sizeof w - offset);
    std::memcpy(reinterpret_cast<uint8_t*>(&w) + offset, data.data(), n);
    auto touched = [&](size_t at, size_t size) { return touches(offset, n, at, size); };

    if (touched(offsetof(CommonConfig, device_feature_select), 4))
        device_feature_select_ = w.device_feature_select;
    if (touched(offsetof(CommonConfig, driver_feature_select), 4))
        driver_feature_select_ = w.driver_feature_select;
    // Features are fixed once the driver set FEATURES_OK.
    if (touched(offsetof(CommonConfig, driver_feature), 4) && driver_feature_select_ < 2 &&
        !(driver_status_ & status::kFeaturesOk)) {
        const unsigned shift = 32 * driver_feature_select_;
        driver_features_ = (driver_features_ & ~(uint64_t{0xffff'ffff} << shift)) |
                           uint64_t{w.driver_feature} << shift;
    }
    if (touched(offsetof(CommonConfig, config_msix_vector), 2))
        config_vector_.store(checked_vector(w.config_msix_vector));
    if (touched(offsetof(CommonConfig, device_status), 1)) write_status(w.device_status);
    if (touched(offsetof(CommonConfig, queue_select), 2)) queue_select_ = w.queue_select;
    if (queue_select_ < num_queues()) set_queue_field(w, offset, n);
}

void Transport::set_queue_field(const CommonConfig& w, uint64_t offset, uint64_t n) {
    auto touched = [&](size_t at, size_t size) { return touches(offset, n, at, size); };
    Queue& q = queues_[queue_select_];
    if (touched(offsetof(CommonConfig, queue_msix_vector), 2))
        queue_vectors_[queue_select_].store(checked_vector(w.queue_msix_vector));
    // An enabled queue's layout is fixed until reset; the device checks it at DRIVER_OK.
    if (q.enabled) return;
    if (touched(offsetof(CommonConfig, queue_size), 2)) q.size = w.queue_size;
    if (touched(offsetof(CommonConfig, queue_desc), 8)) q.desc = w.queue_desc;
    if (touched(offsetof(CommonConfig, queue_driver), 8)) q.driver = w.queue_driver;
    if (touched(offsetof(CommonConfig, queue_device), 8)) q.device = w.queue_device;
    if (touched(offsetof(CommonConfig, queue_enable), 2)) q.enabled = w.queue_enable == 1;
}

uint16_t Transport::checked_vector(uint16_t vector) const {
    // A vector the table does not have reads back as NO_VECTOR: the driver checks that.
    return vector < msix_.size() ? vector : kNoVector;
}

bool Transport::features_acceptable() const {
    return (driver_features_ & ~offered_features_) == 0 && (driver_features_ & kFeatureVersion1);
}

void Transport::write_status(uint8_t value) {
    if (value == 0) return reset();
    const uint8_t old = driver_status_;
    value &= ~status::kNeedsReset;  // the device's bit
    // FEATURES_OK does not stick when the device cannot work with the driver's features.
    if ((value & status::kFeaturesOk) && !(old & status::kFeaturesOk) && !features_acceptable())
        value &= ~status::kFeaturesOk;
    driver_status_ = value;
    if ((value & status::kDriverOk) && !(old & status::kDriverOk)) activate();
}

void Transport::activate() {
    const char* failure = nullptr;
    if (!(driver_status_ & status::kFeaturesOk)) {
        failure = "DRIVER_OK without FEATURES_OK";
    } else {
        ActivateContext context{memory_, driver_features_, {}, {}, *this};
        for (size_t i = 0; i < queues_.size(); ++i) {
            const Queue& q = queues_[i];
            context.queues.push_back(
                {q.size, GuestAddr(q.desc), GuestAddr(q.driver), GuestAddr(q.device), q.enabled});
            context.kicks.push_back(&kicks_[i]);
        }
        if (!device_.activate(std::move(context))) failure = "the device rejected its queues";
    }
    if (!failure) return;
    spdlog::log(failure_logged_ ? spdlog::level::debug : spdlog::level::warn,
                "virtio-pci device type {}: {}: DEVICE_NEEDS_RESET", device_.device_id(), failure);
    failure_logged_ = true;
    needs_reset_.store(true);
    notify_config();  // virtio 1.2, 2.1.2: NEEDS_RESET comes with a config change interrupt
}

void Transport::reset() {
    device_.reset();
    device_feature_select_ = 0;
    driver_feature_select_ = 0;
    driver_features_ = 0;
    driver_status_ = 0;
    queue_select_ = 0;
    std::ranges::fill(queues_, Queue{.size = device_.max_queue_size()});
    for (auto& v : queue_vectors_) v.store(kNoVector);
    config_vector_.store(kNoVector);
    needs_reset_.store(false);
    isr_.store(0);
    // A kick left over from before the reset must not wake the next activation.
    for (const auto& kick : kicks_) kick.consume();
}

void Transport::kick(uint16_t queue) const {
    if (queue < kicks_.size()) kicks_[queue].signal();
}

void Transport::notify_queue(uint16_t queue) {
    if (queue >= queue_vectors_.size()) return;
    isr_.fetch_or(kIsrQueue);
    if (const uint16_t v = queue_vectors_[queue].load(); v != kNoVector) msix_.notify(v);
}

void Transport::notify_config() {
    config_generation_.fetch_add(1);
    isr_.fetch_or(kIsrConfig);
    if (const uint16_t v = config_vector_.load(); v != kNoVector) msix_.notify(v);
}

}  // namespace mvmm::devices::virtio::pci
