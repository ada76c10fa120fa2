#include "devices/pci/msi.h"

namespace mvmm::devices::pci {

namespace {

constexpr uint8_t kCapabilityId = 0x05;
constexpr uint8_t kLength = 14;  // header, control, 64-bit address, data
constexpr uint16_t kControl = 2;
constexpr uint16_t kAddressLow = 4;
constexpr uint16_t kAddressHigh = 8;
constexpr uint16_t kData = 12;
constexpr uint16_t kEnable = 1 << 0;
// Multiple Message Enable is writable, but one message is all there is (capable = 0).
constexpr uint16_t kMultipleMessageEnable = 7 << 4;
constexpr uint16_t k64BitAddress = 1 << 7;

}  // namespace

MsiCapability::MsiCapability(Platform& platform) : vector_(platform.allocate_msi_vector()) {}

void MsiCapability::add_to(ConfigSpace& config) {
    capability_ = config.add_capability(kCapabilityId, kLength);
    config.set(capability_ + kControl, k64BitAddress);
    config.set_writable(capability_ + kControl,
                        static_cast<uint16_t>(kEnable | kMultipleMessageEnable));
    config.set_writable(capability_ + kAddressLow, ~uint32_t{3});  // dword aligned
    config.set_writable(capability_ + kAddressHigh, ~uint32_t{0});
    config.set_writable(capability_ + kData, uint16_t{0xffff});
}

void MsiCapability::config_written(const ConfigSpace& config) {
    enabled_ = config.get<uint16_t>(capability_ + kControl) & kEnable;
    if (!enabled_) return;
    const MsiMessage message{uint64_t{config.get<uint32_t>(capability_ + kAddressHigh)} << 32 |
                                 config.get<uint32_t>(capability_ + kAddressLow),
                             config.get<uint16_t>(capability_ + kData)};
    if (routed_ != message) {
        vector_->route(message);
        routed_ = message;
    }
}

bool MsiCapability::notify() {
    if (!enabled_) return false;
    vector_->trigger();
    return true;
}

}  // namespace mvmm::devices::pci
