// Base address registers: what a function decodes, as the device model declares it.
#pragma once

#include <cstdint>
#include <memory>

#include "devices/bus/address_space.h"

namespace mvmm::devices::pci {

enum class BarKind : uint8_t { Io, Memory32, Memory64 };

struct Bar {
    uint8_t index = 0;  // BAR register 0-5; a 64-bit BAR also takes index + 1
    BarKind kind = BarKind::Memory32;
    uint64_t size = 0;  // a power of two: at least 16 bytes of memory or 4 ports
    bool prefetchable = false;
    std::shared_ptr<IoHandler> handler = nullptr;  // offsets are relative to the BAR's base
};

}  // namespace mvmm::devices::pci
