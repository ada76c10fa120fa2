#include "devices/power/acpi_pm.h"

#include <algorithm>

namespace mvmm::devices {

namespace {
constexpr uint16_t kSleepEnable = 1u << 13;
constexpr unsigned kSleepTypeShift = 10;
constexpr uint16_t kSleepTypeMask = 0x7;
}  // namespace

AcpiPm1::AcpiPm1(uint8_t s5_sleep_type, std::function<void(PowerEvent)> on_event)
    : s5_sleep_type_(s5_sleep_type), on_event_(std::move(on_event)) {}

void AcpiPm1::read(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    // Status reads as 0: no fixed events ever fire.
    uint64_t regs = uint64_t{enable_} << 16 | uint64_t{control_} << 32;
    for (size_t i = 0; i < data.size(); ++i)
        data[i] = offset + i < 8 ? uint8_t(regs >> (8 * (offset + i))) : 0xff;
}

void AcpiPm1::write(uint64_t offset, std::span<const uint8_t> data) {
    bool power_off = false;
    {
        std::lock_guard lock(mutex_);
        for (size_t i = 0; i < data.size(); ++i) {
            uint64_t at = offset + i;
            auto set_byte = [&](uint16_t& reg, unsigned byte) {
                reg = uint16_t((reg & ~(0xff << (8 * byte))) | (data[i] << (8 * byte)));
            };
            if (at == 2 || at == 3) set_byte(enable_, unsigned(at - 2));
            if (at == 4 || at == 5) set_byte(control_, unsigned(at - 4));
        }
        if (control_ & kSleepEnable) {
            power_off = ((control_ >> kSleepTypeShift) & kSleepTypeMask) == s5_sleep_type_;
            control_ &= ~kSleepEnable;  // SLP_EN is write-only
        }
    }
    if (power_off) on_event_(PowerEvent::PowerOff);
}

ResetPort::ResetPort(uint8_t reset_value, std::function<void(PowerEvent)> on_event)
    : reset_value_(reset_value), on_event_(std::move(on_event)) {}

void ResetPort::read(uint64_t, std::span<uint8_t> data) {
    std::fill(data.begin(), data.end(), 0);
}

void ResetPort::write(uint64_t, std::span<const uint8_t> data) {
    // Bit 2 of 0xCF9 starts the reset; Linux writes 0x02 then 0x06.
    if (!data.empty() && (data[0] & reset_value_ & 0x04)) on_event_(PowerEvent::Reset);
}

}  // namespace mvmm::devices
