#include "devices/pci/msix.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace mvmm::devices::pci {

namespace {

constexpr uint8_t kCapabilityId = 0x11;
constexpr uint8_t kCapabilityLength = 12;
constexpr uint16_t kControl = 2;
constexpr uint16_t kTable = 4;
constexpr uint16_t kPba = 8;
constexpr uint16_t kEnable = 1 << 15;
constexpr uint16_t kFunctionMask = 1 << 14;
constexpr uint32_t kVectorMasked = 1;

// Copies `source` from `offset` into `data`; what lies past its end reads 0.
void copy_out(std::span<const std::byte> source, uint64_t offset, std::span<uint8_t> data) {
    std::ranges::fill(data, 0);
    if (offset >= source.size()) return;
    const auto n = std::min<uint64_t>(data.size(), source.size() - offset);
    std::memcpy(data.data(), source.data() + offset, n);
}

}  // namespace

MsixTable::MsixTable(Platform& platform, uint16_t vectors)
    : entries_(vectors), pending_((vectors + 63) / 64), routed_(vectors) {
    if (vectors == 0 || vectors > kMaxVectors)
        throw std::invalid_argument("MSI-X table size " + std::to_string(vectors));
    for (uint16_t i = 0; i < vectors; ++i) vectors_.push_back(platform.allocate_msi_vector());
}

void MsixTable::add_capability(ConfigSpace& config, uint8_t bar, uint32_t table_offset,
                               uint32_t pba_offset) {
    capability_ = config.add_capability(kCapabilityId, kCapabilityLength);
    config.set(capability_ + kControl, static_cast<uint16_t>(size() - 1));
    config.set_writable(capability_ + kControl, static_cast<uint16_t>(kEnable | kFunctionMask));
    config.set(capability_ + kTable, table_offset | bar);
    config.set(capability_ + kPba, pba_offset | bar);
}

void MsixTable::config_written(const ConfigSpace& config) {
    const auto control = config.get<uint16_t>(capability_ + kControl);
    std::lock_guard lock(mutex_);
    enabled_ = control & kEnable;
    function_masked_ = control & kFunctionMask;
    for (uint16_t v = 0; v < size(); ++v) refresh(v);
}

bool MsixTable::can_fire(uint16_t vector) const {
    return enabled_ && !function_masked_ && !(entries_[vector].control & kVectorMasked);
}

void MsixTable::refresh(uint16_t vector) {
    if (!can_fire(vector)) return;
    const Entry& e = entries_[vector];
    const MsiMessage message{uint64_t{e.address_high} << 32 | e.address_low, e.data};
    if (routed_[vector] != message) {
        vectors_[vector]->route(message);
        routed_[vector] = message;
    }
    uint64_t& word = pending_[vector / 64];
    const uint64_t bit = uint64_t{1} << (vector % 64);
    if (word & bit) {
        word &= ~bit;
        vectors_[vector]->trigger();
    }
}

void MsixTable::read_table(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    copy_out(std::as_bytes(std::span(entries_)), offset, data);
}

void MsixTable::write_table(uint64_t offset, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    if (data.empty() || offset >= table_bytes()) return;
    const auto n = std::min<uint64_t>(data.size(), table_bytes() - offset);
    std::memcpy(reinterpret_cast<uint8_t*>(entries_.data()) + offset, data.data(), n);
    for (uint64_t v = offset / kEntrySize; v <= (offset + n - 1) / kEntrySize; ++v) {
        entries_[v].control &= kVectorMasked;  // the other control bits are reserved
        refresh(static_cast<uint16_t>(v));
    }
}

void MsixTable::read_pba(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    copy_out(std::as_bytes(std::span(pending_)), offset, data);
}

void MsixTable::notify(uint16_t vector) {
    std::lock_guard lock(mutex_);
    if (vector >= size() || !enabled_) return;
    if (!can_fire(vector)) {
        pending_[vector / 64] |= uint64_t{1} << (vector % 64);
        return;
    }
    vectors_[vector]->trigger();
}

}  // namespace mvmm::devices::pci
