#include "vmm/report/process_clock.h"

namespace mvmm {

namespace {

// Initialized with the program's other statics, before main().
const std::chrono::steady_clock::time_point kProcessStart = std::chrono::steady_clock::now();

}  // namespace

std::chrono::steady_clock::time_point process_start() noexcept {
    return kProcessStart;
}

int64_t ns_since_start(std::chrono::steady_clock::time_point t) noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - kProcessStart).count();
}

int64_t ns_since_start() noexcept {
    return ns_since_start(std::chrono::steady_clock::now());
}

}  // namespace mvmm
