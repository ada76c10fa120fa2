// The management socket's memory commands; they need nothing from the machine.
#pragma once

#include <nlohmann/json.hpp>

#include "rcu/trim.h"

namespace mvmm::api {

// {trims, time_ns, heap_bytes_released, rss_bytes_released}: also the boot report's form.
nlohmann::json to_json(const rcu::TrimCounters& counters);

// query-memory: the VMM's heap and resident set (/proc), malloc's totals (null when the
// allocator is not glibc's) and the RCU trim counters.
nlohmann::json query_memory();

// trim-memory: one malloc_trim() on the calling thread and what it gave back.  Throws
// std::runtime_error when this build cannot trim.
nlohmann::json trim_memory();

}  // namespace mvmm::api
