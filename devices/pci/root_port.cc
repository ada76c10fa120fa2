#include "devices/pci/root_port.h"

#include <utility>

namespace mvmm::devices::pci {

namespace {

constexpr Identity kRootPortIdentity{.vendor_id = 0x1b36,  // Red Hat, as QEMU
                                     .device_id = 0x000c,  // pcie-root-port
                                     .revision = 0,
                                     .class_code = 0x060400};  // PCI-to-PCI bridge

// PCI Express capability, version 2 (PCIe Base 4.0, 7.5.3); offsets from its start.
namespace express {
constexpr uint8_t kCapabilityId = 0x10;
constexpr uint8_t kLength = 0x3c;
constexpr uint16_t kCapabilities = 0x02;
constexpr uint16_t kDeviceCapabilities = 0x04;
constexpr uint16_t kDeviceControl = 0x08;
constexpr uint16_t kDeviceStatus = 0x0a;
constexpr uint16_t kLinkCapabilities = 0x0c;
constexpr uint16_t kLinkControl = 0x10;
constexpr uint16_t kLinkStatus = 0x12;
constexpr uint16_t kSlotCapabilities = 0x14;
constexpr uint16_t kSlotControl = 0x18;
constexpr uint16_t kSlotStatus = 0x1a;
constexpr uint16_t kRootControl = 0x1c;
constexpr uint16_t kRootStatus = 0x20;
constexpr uint16_t kLinkCapabilities2 = 0x2c;
constexpr uint16_t kLinkControl2 = 0x30;

constexpr uint16_t kVersion2 = 2;
constexpr uint16_t kTypeRootPort = 4 << 4;
constexpr uint16_t kSlotImplemented = 1 << 8;
constexpr uint32_t kRoleBasedErrorReporting = 1 << 15;
constexpr uint32_t kSpeed2_5GT = 1;
constexpr uint32_t kWidthX1 = 1 << 4;
constexpr uint32_t kLinkActiveReporting = 1 << 20;
constexpr uint16_t kLinkActive = 1 << 13;
constexpr uint32_t kPmeStatus = 1 << 16;
// Error reporting enables, relaxed ordering, payload/read request sizes, extended tags,
// no-snoop.
constexpr uint16_t kDeviceControlWritable = 0x79ff;
// ASPM control, link disable, common clock, extended synch; Retrain Link reads 0.
constexpr uint16_t kLinkControlWritable = 0x00d3;
// System error enables and PME interrupt enable.
constexpr uint16_t kRootControlWritable = 0x000f;
}  // namespace express

// Slot Capabilities, Control and Status (PCIe Base 4.0, 7.5.3.9-11).
namespace slot {
constexpr uint32_t kAttentionButton = 1 << 0;
constexpr uint32_t kPowerController = 1 << 1;
constexpr uint32_t kAttentionIndicator = 1 << 3;
constexpr uint32_t kPowerIndicator = 1 << 4;
constexpr uint32_t kHotPlugCapable = 1 << 6;
constexpr unsigned kPhysicalSlotShift = 19;

// Control: event enables, then the indicators and the power controller.
constexpr uint16_t kAttentionButtonEnable = 1 << 0;
constexpr uint16_t kPresenceDetectEnable = 1 << 3;
constexpr uint16_t kCommandCompletedEnable = 1 << 4;
constexpr uint16_t kHotPlugInterruptEnable = 1 << 5;
constexpr unsigned kAttentionIndicatorShift = 6;
constexpr unsigned kPowerIndicatorShift = 8;
constexpr uint16_t kIndicatorMask = 3;
constexpr uint16_t kPowerOff = 1 << 10;
constexpr uint16_t kLinkStateEnable = 1 << 12;
// Power fault, MRL and interlock controls stay 0: the slot has none of them.
constexpr uint16_t kControlWritable =
    kAttentionButtonEnable | kPresenceDetectEnable | kCommandCompletedEnable |
    kHotPlugInterruptEnable | kIndicatorMask << kAttentionIndicatorShift |
    kIndicatorMask << kPowerIndicatorShift | kPowerOff | kLinkStateEnable;

// Status: events (RW1C) and Presence Detect State.
constexpr uint16_t kAttentionButtonPressed = 1 << 0;
constexpr uint16_t kPresenceDetectChanged = 1 << 3;
constexpr uint16_t kCommandCompleted = 1 << 4;
constexpr uint16_t kPresenceDetectState = 1 << 6;
constexpr uint16_t kLinkStateChanged = 1 << 8;
constexpr uint16_t kEvents =
    kAttentionButtonPressed | kPresenceDetectChanged | kCommandCompleted | kLinkStateChanged;

uint16_t indicators(RootPort::Indicator power) {
    return static_cast<uint16_t>(uint16_t{3} << kAttentionIndicatorShift |  // attention off
                                 static_cast<uint16_t>(power) << kPowerIndicatorShift);
}
}  // namespace slot

// Access Control Services (PCIe Base 4.0, 7.7.8): lets an IOMMU isolate the slot.
namespace acs {
constexpr uint16_t kCapabilityId = 0x000d;
constexpr uint16_t kLength = 8;
constexpr uint16_t kCapabilities = 0x04;
constexpr uint16_t kControl = 0x06;
// Source validation, translation blocking, P2P request/completion redirect, upstream
// forwarding.
constexpr uint16_t kFeatures = 0x001f;
}  // namespace acs

// Whether [base, end] lies in the bridge window [window_base, window_limit].
bool inside(uint64_t base, uint64_t end, uint64_t window_base, uint64_t window_limit) {
    return window_base <= window_limit && base >= window_base && end <= window_limit;
}

}  // namespace

RootPort::RootPort(uint8_t port_number, Platform& platform)
    : config_(ConfigSpace::bridge(kRootPortIdentity)), msi_(platform), number_(port_number) {
    using namespace express;
    express_ = config_.add_capability(kCapabilityId, kLength);
    const uint16_t at = express_;
    config_.set(at + kCapabilities, uint16_t{kVersion2 | kTypeRootPort | kSlotImplemented});
    config_.set(at + kDeviceCapabilities, kRoleBasedErrorReporting);  // 128-byte payloads
    config_.set_writable(at + kDeviceControl, kDeviceControlWritable);
    config_.set_write_one_to_clear(at + kDeviceStatus, uint16_t{0x000f});
    config_.set(at + kLinkCapabilities,
                kSpeed2_5GT | kWidthX1 | kLinkActiveReporting | uint32_t{port_number} << 24);
    config_.set_writable(at + kLinkControl, kLinkControlWritable);
    config_.set(at + kLinkStatus, static_cast<uint16_t>(kSpeed2_5GT | kWidthX1));
    config_.set(at + kSlotCapabilities, slot::kAttentionButton | slot::kPowerController |
                                            slot::kAttentionIndicator | slot::kPowerIndicator |
                                            slot::kHotPlugCapable |
                                            uint32_t{port_number} << slot::kPhysicalSlotShift);
    // An empty slot is powered off with its indicators off, as pciehp leaves it.
    config_.set(at + kSlotControl,
                static_cast<uint16_t>(slot::kPowerOff | slot::indicators(Indicator::Off)));
    config_.set_writable(at + kSlotControl, slot::kControlWritable);
    config_.set_write_one_to_clear(at + kSlotStatus, slot::kEvents);
    config_.set_writable(at + kRootControl, kRootControlWritable);
    config_.set_write_one_to_clear(at + kRootStatus, kPmeStatus);
    config_.set(at + kLinkCapabilities2, uint32_t{kSpeed2_5GT << 1});     // supported speeds
    config_.set(at + kLinkControl2, static_cast<uint16_t>(kSpeed2_5GT));  // target speed

    const uint16_t acs_at = config_.add_extended_capability(acs::kCapabilityId, 1, acs::kLength);
    config_.set(acs_at + acs::kCapabilities, acs::kFeatures);
    config_.set_writable(acs_at + acs::kControl, acs::kFeatures);
    msi_.add_to(config_);
}

void RootPort::config_read(uint16_t offset, std::span<uint8_t> data) {
    config_.read(offset, data);
}

void RootPort::config_write(uint16_t offset, std::span<const uint8_t> data) {
    const bool was_powered = powered();
    config_.write(offset, data);
    msi_.config_written(config_);
    const uint16_t control = express_ + express::kSlotControl;
    if (offset < control + 2 && control < offset + data.size()) {
        // Each write to Slot Control is one command, completed at once.
        set_slot_status(slot_status() | slot::kCommandCompleted);
        if (was_powered && !powered() && occupied_ && on_release_) on_release_();
    }
    update_interrupt();
}

uint16_t RootPort::slot_control() const {
    return config_.get<uint16_t>(express_ + express::kSlotControl);
}

uint16_t RootPort::slot_status() const {
    return config_.get<uint16_t>(express_ + express::kSlotStatus);
}

void RootPort::set_slot_status(uint16_t value) {
    config_.set(express_ + express::kSlotStatus, value);
}

bool RootPort::powered() const {
    return !(slot_control() & slot::kPowerOff);
}

RootPort::Indicator RootPort::power_indicator() const {
    return static_cast<Indicator>(slot_control() >> slot::kPowerIndicatorShift &
                                  slot::kIndicatorMask);
}

void RootPort::set_link_active(bool active) {
    const uint16_t at = express_ + express::kLinkStatus;
    const auto status = config_.get<uint16_t>(at);
    config_.set(at, static_cast<uint16_t>(active ? status | express::kLinkActive
                                                 : status & ~express::kLinkActive));
}

void RootPort::set_slot_occupied() {
    occupied_ = true;
    set_link_active(true);
    set_slot_status(slot::kPresenceDetectState);
    config_.set(express_ + express::kSlotControl, slot::indicators(Indicator::On));
}

void RootPort::insert_card() {
    occupied_ = true;
    set_link_active(true);
    raise(slot::kPresenceDetectState | slot::kPresenceDetectChanged | slot::kLinkStateChanged);
}

void RootPort::remove_card() {
    occupied_ = false;
    set_link_active(false);
    set_slot_status(slot_status() & ~slot::kPresenceDetectState);
    raise(slot::kPresenceDetectChanged | slot::kLinkStateChanged);
}

void RootPort::press_attention_button() {
    raise(slot::kAttentionButtonPressed);
}

void RootPort::raise(uint16_t events) {
    set_slot_status(slot_status() | events);
    update_interrupt();
}

bool RootPort::interrupt_pending() const {
    const uint16_t control = slot_control();
    if (!(control & slot::kHotPlugInterruptEnable)) return false;
    // Each status bit's enable sits at the same position, but DLLSC's (bit 8) at bit 12.
    uint16_t enabled = control & (slot::kAttentionButtonEnable | slot::kPresenceDetectEnable |
                                  slot::kCommandCompletedEnable);
    if (control & slot::kLinkStateEnable) enabled |= slot::kLinkStateChanged;
    return slot_status() & enabled;
}

void RootPort::update_interrupt() {
    const bool pending = interrupt_pending();
    if (pending && !interrupt_pending_) msi_.notify();
    interrupt_pending_ = pending;
}

bool RootPort::forwards(BarKind kind, uint64_t base, uint64_t size) const {
    const uint64_t end = base + size - 1;
    if (size == 0 || end < base) return false;
    const auto cmd = config_.get<uint16_t>(reg::kCommand);
    if (kind == BarKind::Io) {
        const uint64_t io_base = uint64_t{config_.get<uint8_t>(reg::kIoBase) & 0xf0u} << 8;
        const uint64_t io_limit =
            (uint64_t{config_.get<uint8_t>(reg::kIoLimit) & 0xf0u} << 8) | 0xfff;
        return (cmd & command::kIoSpace) && inside(base, end, io_base, io_limit);
    }
    if (!(cmd & command::kMemorySpace)) return false;
    auto window = [&](uint16_t base_reg, uint16_t limit_reg) {
        return std::pair{uint64_t{config_.get<uint16_t>(base_reg) & 0xfff0u} << 16,
                         (uint64_t{config_.get<uint16_t>(limit_reg) & 0xfff0u} << 16) | 0xfffff};
    };
    auto [mem_base, mem_limit] = window(reg::kMemoryBase, reg::kMemoryLimit);
    auto [pref_base, pref_limit] = window(reg::kPrefetchableBase, reg::kPrefetchableLimit);
    pref_base |= uint64_t{config_.get<uint32_t>(reg::kPrefetchableBaseUpper)} << 32;
    pref_limit |= uint64_t{config_.get<uint32_t>(reg::kPrefetchableLimitUpper)} << 32;
    return inside(base, end, mem_base, mem_limit) || inside(base, end, pref_base, pref_limit);
}

}  // namespace mvmm::devices::pci
