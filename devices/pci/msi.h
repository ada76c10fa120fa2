// MSI (PCI Local Bus 3.0, 6.8.1) with one message, a 64-bit address and no per-vector
// masking: the interrupt a root port raises for its own events (hot-plug, PME).  The message
// goes to one platform MSI vector (a KVM GSI + irqfd), routed when the guest enables MSI.
// Not thread-safe: the owner serializes config writes and notify().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "devices/pci/config_space.h"
#include "devices/platform.h"

namespace mvmm::devices::pci {

class MsiCapability {
  public:
    // Allocates the platform vector; throws at set-up time.
    explicit MsiCapability(Platform& platform);

    // Adds the capability to `config`.
    void add_to(ConfigSpace& config);
    // Picks up MSI Enable, the address and the data after a guest write to `config`.
    void config_written(const ConfigSpace& config);

    bool enabled() const noexcept { return enabled_; }
    // Sends the message; false while MSI is disabled (the port has no INTx: it is lost, as
    // the guest polls the status registers when it enables MSI).
    bool notify();

  private:
    std::unique_ptr<MsiVector> vector_;
    std::optional<MsiMessage> routed_;
    uint16_t capability_ = 0;
    bool enabled_ = false;
};

}  // namespace mvmm::devices::pci
