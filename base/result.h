// A value or an error, for guest-facing edges where exceptions are the wrong tool
// (std::expected is C++23; Boost 1.74 has no boost::system::result).
#pragma once

#include <utility>
#include <variant>

namespace mvmm {

template <class E>
struct Unexpected {
    E error;
};
template <class E>
Unexpected(E) -> Unexpected<E>;

template <class T, class E>
class [[nodiscard]] Result {
  public:
    Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
    template <class G>
    Result(Unexpected<G> e) : v_(std::in_place_index<1>, E(std::move(e.error))) {}

    bool ok() const noexcept { return v_.index() == 0; }
    explicit operator bool() const noexcept { return ok(); }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    const E& error() const { return std::get<1>(v_); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }

  private:
    std::variant<T, E> v_;
};

// Result<void, E>: success carries nothing.
struct Ok {};

}  // namespace mvmm
