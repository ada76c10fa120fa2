// The fixed ACPI hardware the FADT advertises: PM1a event/control registers (power-off via
// SLP_EN with the S5 sleep type) and the reset register at 0xCF9.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <span>

#include "devices/bus/address_space.h"

namespace mvmm::devices {

enum class PowerEvent { PowerOff, Reset };

class AcpiPm1 : public IoHandler {
  public:
    // `on_event` is called from the vCPU thread that requested it.
    AcpiPm1(uint8_t s5_sleep_type, std::function<void(PowerEvent)> on_event);
    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

    // Offsets inside the 8-byte block: event status (2), event enable (2), control (2).
    static constexpr uint64_t kControlOffset = 4;

  private:
    uint8_t s5_sleep_type_;
    std::function<void(PowerEvent)> on_event_;
    std::mutex mutex_;
    uint16_t enable_ = 0;
    uint16_t control_ = 1;  // SCI_EN: the machine is always in ACPI mode
};

// Port 0xCF9 (and the 8042's 0xFE pulse): any reset request ends the machine.
class ResetPort : public IoHandler {
  public:
    ResetPort(uint8_t reset_value, std::function<void(PowerEvent)> on_event);
    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

  private:
    uint8_t reset_value_;
    std::function<void(PowerEvent)> on_event_;
};

}  // namespace mvmm::devices
