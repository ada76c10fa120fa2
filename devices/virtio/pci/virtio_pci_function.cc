#include "devices/virtio/pci/virtio_pci_function.h"

#include <algorithm>
#include <array>
#include <bit>
#include <stdexcept>

#include <spdlog/spdlog.h>

namespace mvmm::devices::virtio::pci {

namespace {

using devices::pci::BarKind;
using devices::pci::ConfigSpace;

// Vendor-specific capability (virtio 1.2, 4.1.4): cap_len, cfg_type, bar, then offset/length.
constexpr uint8_t kVendorCapability = 0x09;
constexpr uint8_t kCapLength = 16;
constexpr uint8_t kNotifyCapLength = 20;  // + notify_off_multiplier
constexpr uint8_t kAccessCapLength = 20;  // + pci_cfg_data
constexpr uint16_t kCapLen = 2;
constexpr uint16_t kCapCfgType = 3;
constexpr uint16_t kCapBar = 4;
constexpr uint16_t kCapOffset = 8;
constexpr uint16_t kCapBarLength = 12;
constexpr uint16_t kCapExtra = 16;  // notify_off_multiplier or pci_cfg_data

constexpr uint8_t kCommonCfg = 1;
constexpr uint8_t kNotifyCfg = 2;
constexpr uint8_t kIsrCfg = 3;
constexpr uint8_t kDeviceCfg = 4;
constexpr uint8_t kPciCfg = 5;

constexpr uint8_t kBarIndex = 0;
constexpr uint64_t kRegionSize = 0x1000;

devices::pci::Identity identity(const Device& device) {
    uint32_t class_code;
    switch (device.device_id()) {
        case 1:
            class_code = 0x020000;
            break;  // network, Ethernet
        case 2:
        case 8:
            class_code = 0x010000;
            break;  // storage, SCSI (as QEMU)
        default:
            class_code = 0xff0000;
            break;  // unassigned class
    }
    return {.vendor_id = 0x1af4,
            .device_id = static_cast<uint16_t>(0x1040 + device.device_id()),
            .revision = 1,  // modern-only
            .class_code = class_code,
            .subsystem_vendor_id = 0x1af4,
            .subsystem_id = 0x1100};
}

std::unique_ptr<Device> checked(std::unique_ptr<Device> device) {
    if (!device || device->num_queues() == 0 ||
        device->num_queues() > VirtioPciFunction::kMaxQueues)
        throw std::invalid_argument("virtio-pci: a device needs 1 to 1024 queues");
    return device;
}

class BarHandler final : public IoHandler {
  public:
    explicit BarHandler(VirtioPciFunction& function) : function_(function) {}
    void read(uint64_t offset, std::span<uint8_t> data) override {
        function_.bar_read(offset, data);
    }
    void write(uint64_t offset, std::span<const uint8_t> data) override {
        function_.bar_write(offset, data);
    }

  private:
    VirtioPciFunction& function_;
};

}  // namespace

VirtioPciFunction::VirtioPciFunction(std::unique_ptr<Device> device, Platform& platform,
                                     const GuestMemory& memory)
    : platform_(platform),
      device_(checked(std::move(device))),
      msix_(platform, static_cast<uint16_t>(device_->num_queues() + 1)),
      transport_(*device_, memory, msix_),
      config_(ConfigSpace::endpoint(identity(*device_))),
      pba_offset_(kMsixTableOffset + std::max(msix_.table_bytes(), kRegionSize)) {
    bar_ = {.index = kBarIndex,
            .kind = BarKind::Memory64,
            .size = std::bit_ceil(pba_offset_ + msix_.pba_bytes()),
            .prefetchable = false,
            .handler = std::make_shared<BarHandler>(*this)};
    config_.add_bar(bar_);
    msix_.add_capability(config_, kBarIndex, kMsixTableOffset, static_cast<uint32_t>(pba_offset_));
    add_vendor_capability(kCommonCfg, kCapLength, kCommonOffset, sizeof(CommonConfig));
    const uint16_t notify =
        add_vendor_capability(kNotifyCfg, kNotifyCapLength, kNotifyOffset,
                              uint64_t{transport_.num_queues()} * kNotifyMultiplier);
    config_.set(notify + kCapExtra, kNotifyMultiplier);
    add_vendor_capability(kIsrCfg, kCapLength, kIsrOffset, 1);
    add_vendor_capability(kDeviceCfg, kCapLength, kDeviceOffset, kRegionSize);
    // The driver picks a BAR window in the capability, then accesses it through pci_cfg_data.
    config_access_cap_ = add_vendor_capability(kPciCfg, kAccessCapLength, 0, 0);
    config_.set_writable(config_access_cap_ + kCapBar, uint8_t{0xff});
    for (uint16_t field : {kCapOffset, kCapBarLength, kCapExtra})
        config_.set_writable(config_access_cap_ + field, ~uint32_t{0});
}

VirtioPciFunction::~VirtioPciFunction() {
    remove_ioeventfds();
    // The device's I/O threads notify through transport_ and msix_, which die before device_:
    // stop its queues first (reset waits for a batch in progress).
    device_->reset();
}

uint16_t VirtioPciFunction::add_vendor_capability(uint8_t cfg_type, uint8_t length, uint64_t offset,
                                                  uint64_t size) {
    const uint16_t at = config_.add_capability(kVendorCapability, length);
    config_.set(at + kCapLen, length);
    config_.set(at + kCapCfgType, cfg_type);
    config_.set(at + kCapBar, kBarIndex);
    config_.set(at + kCapOffset, static_cast<uint32_t>(offset));
    config_.set(at + kCapBarLength, static_cast<uint32_t>(size));
    return at;
}

std::optional<VirtioPciFunction::BarWindow> VirtioPciFunction::config_access(uint16_t offset,
                                                                             size_t size) const {
    const uint16_t data_at = config_access_cap_ + kCapExtra;
    if (offset >= data_at + 4 || data_at >= offset + size) return std::nullopt;
    const BarWindow window{config_.get<uint32_t>(config_access_cap_ + kCapOffset),
                           config_.get<uint32_t>(config_access_cap_ + kCapBarLength)};
    const bool valid = config_.get<uint8_t>(config_access_cap_ + kCapBar) == kBarIndex &&
                       (window.length == 1 || window.length == 2 || window.length == 4) &&
                       window.offset % window.length == 0 &&
                       window.offset + window.length <= bar_.size;
    return valid ? std::optional(window) : std::nullopt;
}

void VirtioPciFunction::config_read(uint16_t offset, std::span<uint8_t> data) {
    if (const auto window = config_access(offset, data.size())) {
        std::array<uint8_t, 4> bytes{};
        bar_read(window->offset, std::span(bytes).first(window->length));
        config_.set(config_access_cap_ + kCapExtra, bytes);
    }
    config_.read(offset, data);
}

void VirtioPciFunction::config_write(uint16_t offset, std::span<const uint8_t> data) {
    config_.write(offset, data);
    msix_.config_written(config_);
    if (const auto window = config_access(offset, data.size())) {
        const auto bytes = config_.get<std::array<uint8_t, 4>>(config_access_cap_ + kCapExtra);
        bar_write(window->offset, std::span(bytes).first(window->length));
    }
}

void VirtioPciFunction::bar_read(uint64_t offset, std::span<uint8_t> data) {
    std::ranges::fill(data, 0);
    if (offset < kIsrOffset)
        transport_.read_common(offset - kCommonOffset, data);
    else if (offset < kDeviceOffset)
        data[0] = offset == kIsrOffset ? transport_.read_isr() : 0;
    else if (offset < kNotifyOffset)
        device_->read_config(offset - kDeviceOffset, data);
    else if (offset < kMsixTableOffset)
        return;  // notify addresses read 0
    else if (offset < pba_offset_)
        msix_.read_table(offset - kMsixTableOffset, data);
    else
        msix_.read_pba(offset - pba_offset_, data);
}

void VirtioPciFunction::bar_write(uint64_t offset, std::span<const uint8_t> data) {
    if (offset < kIsrOffset) {
        transport_.write_common(offset - kCommonOffset, data);
    } else if (offset < kDeviceOffset) {
        return;  // ISR status is read-only
    } else if (offset < kNotifyOffset) {
        device_->write_config(offset - kDeviceOffset, data);
    } else if (offset < kMsixTableOffset) {
        const uint64_t notify = offset - kNotifyOffset;
        if (notify % kNotifyMultiplier == 0)
            transport_.kick(static_cast<uint16_t>(notify / kNotifyMultiplier));
    } else if (offset < pba_offset_) {
        msix_.write_table(offset - kMsixTableOffset, data);
    }
}

void VirtioPciFunction::bar_mapped(uint8_t index, std::optional<uint64_t> base) {
    if (index != kBarIndex) return;
    remove_ioeventfds();
    bar_base_ = base;
    if (base) add_ioeventfds();
}

GuestAddr VirtioPciFunction::notify_address(uint16_t queue) const {
    return GuestAddr(*bar_base_ + kNotifyOffset + uint64_t{queue} * kNotifyMultiplier);
}

void VirtioPciFunction::add_ioeventfds() {
    ioeventfds_.assign(transport_.num_queues(), false);
    for (uint16_t q = 0; q < transport_.num_queues(); ++q) {
        // Linux writes the queue index as 16 bits.  Registration fails where the guest put
        // another device's notify address (overlapping BARs); the notify write then exits to
        // bar_write(), which signals the same EventFd, so the guest cannot make this fatal.
        try {
            platform_.add_ioeventfd(notify_address(q), 2, transport_.kick_fd(q));
            ioeventfds_[q] = true;
        } catch (const std::exception& e) {
            spdlog::debug("virtio-pci: no ioeventfd at {:#x}: {}", notify_address(q).value(),
                          e.what());
        }
    }
}

void VirtioPciFunction::remove_ioeventfds() {
    for (uint16_t q = 0; q < ioeventfds_.size(); ++q) {
        if (!ioeventfds_[q]) continue;
        try {
            platform_.remove_ioeventfd(notify_address(q), 2, transport_.kick_fd(q));
        } catch (const std::exception& e) {
            spdlog::debug("virtio-pci: removing the ioeventfd of queue {}: {}", q, e.what());
        }
    }
    ioeventfds_.clear();
}

}  // namespace mvmm::devices::virtio::pci
