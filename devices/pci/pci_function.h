// The seam between the PCI bus and a device model: config space plus BARs.  The bus owns
// everything about *where* a function decodes (it reads the BAR and command registers after
// each config write and maps the BARs' handlers into the MMIO/PIO spaces); the function only
// keeps its registers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "devices/pci/bar.h"

namespace mvmm::devices::pci {

class PciFunction {
  public:
    virtual ~PciFunction() = default;

    // A guest config access: offset + data.size() <= 4096, any size from 1 to 4 bytes.
    virtual void config_read(uint16_t offset, std::span<uint8_t> data) = 0;
    virtual void config_write(uint16_t offset, std::span<const uint8_t> data) = 0;

    // The BARs, fixed for the function's lifetime; their registers must follow ConfigSpace's
    // add_bar() layout.
    virtual std::vector<Bar> bars() const { return {}; }

    // The bus mapped BAR `index` at `base`, or unmapped it (nullopt): decoding turned off, the
    // guest moved it, or a bridge window above it closed.
    virtual void bar_mapped(uint8_t /*index*/, std::optional<uint64_t> /*base*/) {}
};

}  // namespace mvmm::devices::pci
