// Internal to rcu/: one measured malloc_trim().
#pragma once

#include <cstddef>
#include <optional>

#include "rcu/trim.h"

namespace mvmm::rcu {

// nullopt when this build cannot trim.
std::optional<TrimResult> trim_heap(std::size_t pad);

}  // namespace mvmm::rcu
