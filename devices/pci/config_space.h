// The 4 KiB configuration space of one PCI function: register bytes plus, per bit, whether
// the guest may write it (RW) or clears it by writing 1 (RW1C); everything else is read-only.
// Device models build their header, BARs and capability lists here at set-up time and let
// guest accesses go through read()/write(), so masking lives in one place.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>

#include "devices/pci/bar.h"

namespace mvmm::devices::pci {

static_assert(std::endian::native == std::endian::little, "config space is little-endian");

// Standard header registers (PCI Local Bus 3.0, 6.1; PCI-to-PCI Bridge 1.2, 3.2).
namespace reg {
inline constexpr uint16_t kVendorId = 0x00;
inline constexpr uint16_t kDeviceId = 0x02;
inline constexpr uint16_t kCommand = 0x04;
inline constexpr uint16_t kStatus = 0x06;
inline constexpr uint16_t kRevision = 0x08;
inline constexpr uint16_t kClassCode = 0x09;  // 3 bytes: prog-if, subclass, class
inline constexpr uint16_t kCacheLineSize = 0x0c;
inline constexpr uint16_t kHeaderType = 0x0e;
inline constexpr uint16_t kBar0 = 0x10;
inline constexpr uint16_t kSubsystemVendorId = 0x2c;
inline constexpr uint16_t kSubsystemId = 0x2e;
inline constexpr uint16_t kCapabilities = 0x34;
inline constexpr uint16_t kInterruptLine = 0x3c;
inline constexpr uint16_t kInterruptPin = 0x3d;
// Type 1 (bridge) header.
inline constexpr uint16_t kPrimaryBus = 0x18;
inline constexpr uint16_t kSecondaryBus = 0x19;
inline constexpr uint16_t kSubordinateBus = 0x1a;
inline constexpr uint16_t kIoBase = 0x1c;
inline constexpr uint16_t kIoLimit = 0x1d;
inline constexpr uint16_t kSecondaryStatus = 0x1e;
inline constexpr uint16_t kMemoryBase = 0x20;
inline constexpr uint16_t kMemoryLimit = 0x22;
inline constexpr uint16_t kPrefetchableBase = 0x24;
inline constexpr uint16_t kPrefetchableLimit = 0x26;
inline constexpr uint16_t kPrefetchableBaseUpper = 0x28;
inline constexpr uint16_t kPrefetchableLimitUpper = 0x2c;
inline constexpr uint16_t kBridgeControl = 0x3e;
// Everything that decides where a function or bridge decodes lies below this offset.
inline constexpr uint16_t kHeaderEnd = 0x40;
}  // namespace reg

namespace command {
inline constexpr uint16_t kIoSpace = 1 << 0;
inline constexpr uint16_t kMemorySpace = 1 << 1;
inline constexpr uint16_t kBusMaster = 1 << 2;
inline constexpr uint16_t kParityErrorResponse = 1 << 6;
inline constexpr uint16_t kSerr = 1 << 8;
inline constexpr uint16_t kInterruptDisable = 1 << 10;
}  // namespace command

inline constexpr uint16_t kStatusCapabilityList = 1 << 4;
// Error bits of the (secondary) status register; the guest clears them by writing 1.
inline constexpr uint16_t kStatusErrorBits = 0xf900;
inline constexpr uint8_t kHeaderTypeBridge = 0x01;
inline constexpr uint8_t kHeaderTypeMultiFunction = 0x80;

// Who a function says it is.
struct Identity {
    uint16_t vendor_id = 0;
    uint16_t device_id = 0;
    uint8_t revision = 0;
    uint32_t class_code = 0;  // class << 16 | subclass << 8 | prog-if
    uint16_t subsystem_vendor_id = 0;
    uint16_t subsystem_id = 0;
};

class ConfigSpace {
  public:
    static constexpr uint32_t kSize = 4096;
    static constexpr uint16_t kExtendedStart = 0x100;

    // A type 0 (endpoint) or type 1 (bridge) header with the standard write masks.
    static ConfigSpace endpoint(const Identity& id);
    static ConfigSpace bridge(const Identity& id);

    // Guest accesses, through the masks.  The caller keeps offset + size within kSize.
    void read(uint16_t offset, std::span<uint8_t> data) const;
    void write(uint16_t offset, std::span<const uint8_t> data);

    // Device-side access that ignores the masks.
    template <class T>
    T get(uint16_t offset) const {
        T v;
        std::memcpy(&v, bytes_.data() + offset, sizeof v);
        return v;
    }
    template <class T>
    void set(uint16_t offset, T value) {
        std::memcpy(bytes_.data() + offset, &value, sizeof value);
    }
    // Bits the guest may write at `offset`.
    template <class T>
    void set_writable(uint16_t offset, T mask) {
        std::memcpy(writable_.data() + offset, &mask, sizeof mask);
    }
    // Bits the guest clears by writing 1 at `offset`.
    template <class T>
    void set_write_one_to_clear(uint16_t offset, T mask) {
        std::memcpy(write_clear_.data() + offset, &mask, sizeof mask);
    }

    // Appends a capability (`length` bytes including its 2-byte header) to the list in
    // 0x40-0xFF and returns its offset; throws when it does not fit.
    uint16_t add_capability(uint8_t id, uint8_t length);
    // Appends a PCI Express extended capability (4-byte header included) from 0x100 on.
    uint16_t add_extended_capability(uint16_t id, uint8_t version, uint16_t length);

    // Declares `bar`: its type bits, and a write mask that makes sizing work (writing all
    // ones reads back the size mask).  Throws on a size that is not a power of two.
    void add_bar(const Bar& bar);

  private:
    std::array<uint8_t, kSize> bytes_{};
    std::array<uint8_t, kSize> writable_{};
    std::array<uint8_t, kSize> write_clear_{};
    uint16_t next_capability_ = reg::kHeaderEnd;
    uint16_t last_link_ = reg::kCapabilities;  // where the next capability's offset goes
    uint16_t next_extended_ = kExtendedStart;
    uint16_t last_extended_ = 0;  // 0 until the first extended capability
};

}  // namespace mvmm::devices::pci
