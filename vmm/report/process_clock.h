// The boot report's clock: monotonic nanoseconds since this process started (mvmm's static
// initialization, right after exec and dynamic linking).
#pragma once

#include <chrono>
#include <cstdint>

namespace mvmm {

// When the process started, on std::chrono::steady_clock (CLOCK_MONOTONIC).
std::chrono::steady_clock::time_point process_start() noexcept;
// `t` (default: now) as nanoseconds since process_start().
int64_t ns_since_start(std::chrono::steady_clock::time_point t) noexcept;
int64_t ns_since_start() noexcept;

}  // namespace mvmm
