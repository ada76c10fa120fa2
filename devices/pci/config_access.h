// The two ways a guest reaches PCI config space, as I/O handlers for the host bridge to map:
//
//   auto ecam = make_ecam_handler(bridge);                    // MMCONFIG, 1 MiB per bus
//   auto ports = make_legacy_config_handler(bridge, reset);   // 0xCF8-0xCFF
//
// Both turn an access into one config cycle on a ConfigCycles (the host bridge), or into
// all-ones reads and ignored writes when the access makes none: ECAM takes naturally aligned
// 1, 2 and 4 byte accesses; CONFIG_ADDRESS (0xCF8) is dword only, CONFIG_DATA (0xCFC) takes any
// access within its dword while CONFIG_ADDRESS has its enable bit set.  The byte at 0xCF9 is the
// chipset's reset control register, passed on to `reset_control` when there is one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "devices/bus/address_space.h"

namespace mvmm::devices::pci {

// What carries a config cycle to the addressed function (offset + size <= 4096).
class ConfigCycles {
  public:
    virtual ~ConfigCycles() = default;
    virtual void config_read(uint8_t bus, uint8_t devfn, uint16_t offset,
                             std::span<uint8_t> data) = 0;
    virtual void config_write(uint8_t bus, uint8_t devfn, uint16_t offset,
                              std::span<const uint8_t> data) = 0;
};

inline constexpr uint64_t kEcamBytesPerBus = 1 << 20;
inline constexpr uint16_t kConfigAddressPort = 0xcf8;  // then CONFIG_DATA at 0xCFC
inline constexpr uint64_t kConfigPortsBytes = 8;

// `cycles` must outlive the handlers.
std::shared_ptr<IoHandler> make_ecam_handler(ConfigCycles& cycles);
std::shared_ptr<IoHandler> make_legacy_config_handler(ConfigCycles& cycles,
                                                      std::shared_ptr<IoHandler> reset_control);

}  // namespace mvmm::devices::pci
