// Byte counts as people read them, for messages.
#pragma once

#include <cstdint>
#include <string>

namespace mvmm {

// 536870912 -> "512 MiB", 1610612736 -> "1.5 GiB".
std::string format_size(uint64_t bytes);

}  // namespace mvmm
