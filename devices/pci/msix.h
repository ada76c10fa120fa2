// MSI-X (PCI Local Bus 3.0, 6.8.2): a capability in config space plus a vector table and a
// pending-bit array (PBA) that live in one of the function's BARs.  Each table entry is
// routed to its own platform MSI vector (a KVM GSI + irqfd) while it can fire; a vector that
// fires while masked sets its pending bit and fires when unmasked.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "devices/pci/config_space.h"
#include "devices/platform.h"

namespace mvmm::devices::pci {

class MsixTable {
  public:
    static constexpr uint16_t kMaxVectors = 2048;
    static constexpr uint64_t kEntrySize = 16;

    // Allocates `vectors` (1-2048) platform MSI vectors; throws at set-up time.
    MsixTable(Platform& platform, uint16_t vectors);

    uint16_t size() const noexcept { return static_cast<uint16_t>(entries_.size()); }
    uint64_t table_bytes() const noexcept { return entries_.size() * kEntrySize; }
    uint64_t pba_bytes() const noexcept { return pending_.size() * sizeof(uint64_t); }

    // Adds the capability to `config`, pointing at the table and PBA at the given offsets
    // (8-byte aligned) of BAR `bar`.
    void add_capability(ConfigSpace& config, uint8_t bar, uint32_t table_offset,
                        uint32_t pba_offset);
    // Picks up MSI-X Enable and Function Mask after a guest write to `config`.
    void config_written(const ConfigSpace& config);

    // Guest accesses, `offset` relative to the table or PBA; bytes past the end read 0.
    void read_table(uint64_t offset, std::span<uint8_t> data);
    void write_table(uint64_t offset, std::span<const uint8_t> data);
    void read_pba(uint64_t offset, std::span<uint8_t> data);

    // Raises `vector`, or marks it pending while it is masked.  Thread-safe; ignored while
    // MSI-X is disabled or for a vector past the table.
    void notify(uint16_t vector);

  private:
    struct Entry {
        uint32_t address_low = 0;
        uint32_t address_high = 0;
        uint32_t data = 0;
        uint32_t control = 1;  // bit 0: masked, the reset state
    };

    bool can_fire(uint16_t vector) const;  // requires mutex_
    void refresh(uint16_t vector);         // requires mutex_

    std::mutex mutex_;
    std::vector<Entry> entries_;
    std::vector<uint64_t> pending_;  // the PBA, one bit per vector
    std::vector<std::unique_ptr<MsiVector>> vectors_;
    std::vector<std::optional<MsiMessage>> routed_;  // what each platform vector points at
    uint16_t capability_ = 0;
    bool enabled_ = false;
    bool function_masked_ = false;
};

}  // namespace mvmm::devices::pci
