// A fixed-capacity map from table offsets to cache slots: open addressing with linear probing,
// allocated once, so looking tables up and replacing them never allocates.
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <vector>

namespace mvmm::devices::block::qcow2 {

class OffsetIndex {
  public:
    // Room for `capacity` offsets at most half the buckets full.
    explicit OffsetIndex(size_t capacity)
        : shift_(64 - std::countr_zero(std::bit_ceil(capacity * 2 + 2))),
          keys_(size_t{1} << (64 - shift_), kEmpty),
          slots_(keys_.size()) {}

    std::optional<uint32_t> find(uint64_t offset) const {
        for (size_t i = home(offset);; i = next(i)) {
            if (keys_[i] == offset) return slots_[i];
            if (keys_[i] == kEmpty) return std::nullopt;
        }
    }
    // `offset` must be absent, and fewer than `capacity` offsets present.
    void insert(uint64_t offset, uint32_t slot) {
        size_t i = home(offset);
        while (keys_[i] != kEmpty) i = next(i);
        keys_[i] = offset;
        slots_[i] = slot;
    }
    void erase(uint64_t offset) {
        size_t hole = home(offset);
        while (keys_[hole] != offset) {
            if (keys_[hole] == kEmpty) return;
            hole = next(hole);
        }
        // Shift later members of the probe run back into the hole, so finds stay correct.
        for (size_t i = next(hole); keys_[i] != kEmpty; i = next(i)) {
            const size_t want = home(keys_[i]);
            const bool between = hole < i ? (want > hole && want <= i) : (want > hole || want <= i);
            if (between) continue;  // already as close to home as it may be
            keys_[hole] = keys_[i];
            slots_[hole] = slots_[i];
            hole = i;
        }
        keys_[hole] = kEmpty;
    }

  private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // never a table offset

    size_t home(uint64_t offset) const { return (offset * 0x9e3779b97f4a7c15ull) >> shift_; }
    size_t next(size_t i) const { return (i + 1) & (keys_.size() - 1); }

    int shift_;
    std::vector<uint64_t> keys_;
    std::vector<uint32_t> slots_;
};

}  // namespace mvmm::devices::block::qcow2
