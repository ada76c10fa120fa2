#include "devices/pci/config_space.h"

#include <stdexcept>
#include <string>

namespace mvmm::devices::pci {

namespace {

constexpr uint16_t align4(uint32_t v) {
    return static_cast<uint16_t>((v + 3) & ~3u);
}

ConfigSpace header(const Identity& id, uint8_t header_type) {
    ConfigSpace space;
    space.set(reg::kVendorId, id.vendor_id);
    space.set(reg::kDeviceId, id.device_id);
    space.set(reg::kRevision, id.revision);
    space.set(reg::kClassCode, static_cast<uint8_t>(id.class_code));
    space.set(reg::kClassCode + 1, static_cast<uint16_t>(id.class_code >> 8));
    space.set(reg::kHeaderType, header_type);
    space.set_writable(reg::kCommand, uint16_t{command::kIoSpace | command::kMemorySpace |
                                               command::kBusMaster | command::kParityErrorResponse |
                                               command::kSerr | command::kInterruptDisable});
    space.set_write_one_to_clear(reg::kStatus, kStatusErrorBits);
    space.set_writable(reg::kCacheLineSize, uint8_t{0xff});
    space.set_writable(reg::kInterruptLine, uint8_t{0xff});
    return space;
}

}  // namespace

ConfigSpace ConfigSpace::endpoint(const Identity& id) {
    ConfigSpace space = header(id, 0);
    space.set(reg::kSubsystemVendorId, id.subsystem_vendor_id);
    space.set(reg::kSubsystemId, id.subsystem_id);
    return space;
}

ConfigSpace ConfigSpace::bridge(const Identity& id) {
    ConfigSpace space = header(id, kHeaderTypeBridge);
    // Bus numbers are the guest's to assign.
    for (uint16_t r : {reg::kPrimaryBus, reg::kSecondaryBus, reg::kSubordinateBus})
        space.set_writable(r, uint8_t{0xff});
    // I/O window: 4 KiB granules, 16-bit addressing (the low nibble reads 0).
    space.set_writable(reg::kIoBase, uint8_t{0xf0});
    space.set_writable(reg::kIoLimit, uint8_t{0xf0});
    space.set_write_one_to_clear(reg::kSecondaryStatus, kStatusErrorBits);
    // Memory windows: 1 MiB granules; the prefetchable one is 64-bit (low nibble 1).
    for (uint16_t r :
         {reg::kMemoryBase, reg::kMemoryLimit, reg::kPrefetchableBase, reg::kPrefetchableLimit})
        space.set_writable(r, uint16_t{0xfff0});
    space.set(reg::kPrefetchableBase, uint16_t{1});
    space.set(reg::kPrefetchableLimit, uint16_t{1});
    space.set_writable(reg::kPrefetchableBaseUpper, ~uint32_t{0});
    space.set_writable(reg::kPrefetchableLimitUpper, ~uint32_t{0});
    // Parity error response and SERR# forwarding; no ISA/VGA routing.
    space.set_writable(reg::kBridgeControl, uint16_t{0x0003});
    return space;
}

void ConfigSpace::read(uint16_t offset, std::span<uint8_t> data) const {
    std::memcpy(data.data(), bytes_.data() + offset, data.size());
}

void ConfigSpace::write(uint16_t offset, std::span<const uint8_t> data) {
    for (size_t i = 0; i < data.size(); ++i) {
        const size_t at = offset + i;
        const uint8_t v = data[i];
        bytes_[at] = static_cast<uint8_t>((bytes_[at] & ~writable_[at]) | (v & writable_[at]));
        bytes_[at] &= static_cast<uint8_t>(~(v & write_clear_[at]));
    }
}

uint16_t ConfigSpace::add_capability(uint8_t id, uint8_t length) {
    const uint16_t offset = next_capability_;
    if (length < 2 || offset + length > kExtendedStart)
        throw std::length_error("PCI capability " + std::to_string(id) + " does not fit");
    set(offset, id);
    set(offset + 1, uint8_t{0});
    set(last_link_, static_cast<uint8_t>(offset));
    last_link_ = offset + 1;
    next_capability_ = align4(offset + length);
    set(reg::kStatus, static_cast<uint16_t>(get<uint16_t>(reg::kStatus) | kStatusCapabilityList));
    return offset;
}

uint16_t ConfigSpace::add_extended_capability(uint16_t id, uint8_t version, uint16_t length) {
    const uint16_t offset = next_extended_;
    if (length < 4 || offset + length > kSize)
        throw std::length_error("PCIe extended capability " + std::to_string(id) + " does not fit");
    set(offset, static_cast<uint32_t>(id | uint32_t{version} << 16));
    if (last_extended_ != 0)
        set(last_extended_, get<uint32_t>(last_extended_) | uint32_t{offset} << 20);
    last_extended_ = offset;
    next_extended_ = align4(offset + length);
    return offset;
}

void ConfigSpace::add_bar(const Bar& bar) {
    const bool is64 = bar.kind == BarKind::Memory64;
    const uint64_t min_size = bar.kind == BarKind::Io ? 4 : 16;
    const uint64_t max_size = bar.kind == BarKind::Io         ? 0x1'0000
                              : bar.kind == BarKind::Memory32 ? 0x8000'0000
                                                              : uint64_t{1} << 63;
    if (!std::has_single_bit(bar.size) || bar.size < min_size || bar.size > max_size ||
        bar.index + (is64 ? 1 : 0) > 5)
        throw std::invalid_argument("bad BAR " + std::to_string(bar.index));
    const uint16_t offset = reg::kBar0 + 4 * bar.index;
    const uint64_t address_mask = ~(bar.size - 1);
    if (bar.kind == BarKind::Io) {
        // Bit 0 says I/O; only 16 address bits decode, the upper half is hardwired to 0.
        set(offset, uint32_t{1});
        set_writable(offset, static_cast<uint32_t>(address_mask & 0xfffc));
        return;
    }
    const uint32_t type = (is64 ? 0x4u : 0x0u) | (bar.prefetchable ? 0x8u : 0x0u);
    set(offset, type);
    set_writable(offset, static_cast<uint32_t>(address_mask & ~uint64_t{0xf}));
    if (is64) set_writable(offset + 4, static_cast<uint32_t>(address_mask >> 32));
}

}  // namespace mvmm::devices::pci
