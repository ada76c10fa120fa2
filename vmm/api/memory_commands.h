// The management socket's memory commands; they need nothing from the machine.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "rcu/trim.h"

namespace mvmm::api {

// {trims, time_ns, heap_bytes_released, rss_bytes_released}: also the boot report's form.
nlohmann::json to_json(const rcu::TrimCounters& counters);

// [{at_ns, from_batch, policy, factor}]: when each change was made (ns since mvmm started)
// and the RCU batch from which it decides.  Also the boot report's trim.policy_changes.
nlohmann::json to_json(const std::vector<rcu::TrimPolicyChange>& changes);

// query-memory: the VMM's heap and resident set (/proc), malloc's totals (null when the
// allocator is not glibc's) and the RCU trim counters.
nlohmann::json query_memory();

// set-memory-policy {trim-policy, trim-factor} (at least one): the trim policy from the
// call thread's next decision on.  Replies {policy, factor, from_batch}.  Throws
// std::invalid_argument, changing nothing, for an unknown key, policy or a bad factor.
nlohmann::json set_memory_policy(const nlohmann::json& arguments);

// query-memory-policy: {policy, factor, supported, batches, changes, recent_changes}.
nlohmann::json query_memory_policy();

// trim-memory: one malloc_trim() on the calling thread and what it gave back.  Throws
// std::runtime_error when this build cannot trim.
nlohmann::json trim_memory();

}  // namespace mvmm::api
