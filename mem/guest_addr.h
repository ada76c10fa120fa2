// Strong types for the address spaces a VMM juggles: mixing them does not compile.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>

namespace mvmm {

template <class Tag, class Rep>
class Address {
  public:
    constexpr Address() = default;
    constexpr explicit Address(Rep v) : v_(v) {}
    constexpr Rep value() const noexcept { return v_; }
    constexpr auto operator<=>(const Address&) const = default;

    // Offset arithmetic that reports wrap-around instead of silently wrapping.
    constexpr std::optional<Address> checked_add(uint64_t n) const noexcept {
        Rep out;
        if (__builtin_add_overflow(v_, n, &out)) return std::nullopt;
        return Address(out);
    }
    constexpr Address operator+(uint64_t n) const noexcept { return Address(Rep(v_ + n)); }
    constexpr uint64_t operator-(Address other) const noexcept { return v_ - other.v_; }

  private:
    Rep v_ = 0;
};

struct GuestAddrTag {};
struct PioPortTag {};
using GuestAddr = Address<GuestAddrTag, uint64_t>;  // guest-physical address (RAM or MMIO)
using PioPort = Address<PioPortTag, uint16_t>;      // x86 I/O port

}  // namespace mvmm
