// SCSI fields are big-endian: loads and stores of n-byte fields in checked byte spans.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>

namespace mvmm::devices::virtio::scsi {

// The `n`-byte (1..8) big-endian field at `at`; the caller has checked the span's length.
inline uint64_t load_be(std::span<const uint8_t> bytes, size_t at, size_t n) {
    assert(n <= 8 && at + n <= bytes.size());
    uint64_t value = 0;
    for (size_t i = 0; i < n; ++i) value = value << 8 | bytes[at + i];
    return value;
}

inline void store_be(std::span<uint8_t> bytes, size_t at, uint64_t value, size_t n) {
    assert(n <= 8 && at + n <= bytes.size());
    for (size_t i = n; i-- > 0; value >>= 8) bytes[at + i] = static_cast<uint8_t>(value);
}

}  // namespace mvmm::devices::virtio::scsi
