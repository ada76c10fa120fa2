#include "vmm/api/memory_commands.h"

#include <stdexcept>
#include <string>

#include "rcu/trim.h"
#include "vmm/report/process_clock.h"
#include "vmm/report/process_memory.h"

namespace mvmm::api {

nlohmann::json to_json(const rcu::TrimCounters& counters) {
    return {{"trims", counters.trims},
            {"time_ns", counters.time.count()},
            {"heap_bytes_released", counters.heap_bytes_released},
            {"rss_bytes_released", counters.rss_bytes_released}};
}

nlohmann::json to_json(const std::vector<rcu::TrimPolicyChange>& changes) {
    auto list = nlohmann::json::array();
    for (const auto& change : changes)
        list.push_back({{"at_ns", ns_since_start(change.at)},
                        {"from_batch", change.from_batch},
                        {"policy", rcu::to_string(change.config.policy)},
                        {"factor", change.config.factor}});
    return list;
}

namespace {

nlohmann::json to_json(const std::optional<rcu::MallocTotals>& totals) {
    if (!totals) return nullptr;
    return {{"arena", totals->arena},
            {"hblkhd", totals->hblkhd},
            {"uordblks", totals->uordblks},
            {"fordblks", totals->fordblks},
            {"keepcost", totals->keepcost}};
}

}  // namespace

nlohmann::json query_memory() {
    const SmapsTotals smaps = read_smaps();
    const StatusTotals status = read_status();
    const rcu::TrimStats trim = rcu::trim_stats();
    return {{"heap_rss_bytes", smaps.heap_rss_bytes},
            {"heap_size_bytes", smaps.heap_size_bytes},
            {"anon_rss_bytes", smaps.anon_rss_bytes},
            {"vm_rss_bytes", status.vm_rss_bytes},
            {"vm_hwm_bytes", status.vm_hwm_bytes},
            {"malloc", to_json(rcu::malloc_totals())},
            {"trim",
             {{"policy", rcu::to_string(trim.config.policy)},
              {"supported", trim.supported},
              {"batches", trim.batches},
              {"callbacks", trim.callbacks},
              {"by_policy", to_json(trim.by_policy)},
              {"on_demand", to_json(trim.on_demand)}}}};
}

nlohmann::json set_memory_policy(const nlohmann::json& arguments) {
    rcu::TrimConfig config = rcu::trim_stats().config;
    if (arguments.empty())
        throw std::invalid_argument(
            "give trim-policy (off, batch, drain, adaptive), trim-factor or both");
    for (const auto& [key, value] : arguments.items()) {
        if (key == "trim-policy" && value.is_string())
            config.policy = rcu::parse_trim_policy(value.get<std::string>());
        else if (key == "trim-factor" && value.is_number())
            config.factor = value.get<double>();
        else if (key == "trim-policy" || key == "trim-factor")
            throw std::invalid_argument(key + " must be a " +
                                        (key == "trim-policy" ? "string" : "number"));
        else
            throw std::invalid_argument("unknown argument '" + key +
                                        "'; known: trim-policy, trim-factor");
    }
    const rcu::TrimPolicyChange change = rcu::set_trim_policy(config);  // validates
    return {{"policy", rcu::to_string(change.config.policy)},
            {"factor", change.config.factor},
            {"from_batch", change.from_batch}};
}

nlohmann::json query_memory_policy() {
    const rcu::TrimStats trim = rcu::trim_stats();
    return {{"policy", rcu::to_string(trim.config.policy)},
            {"factor", trim.config.factor},
            {"supported", trim.supported},
            {"batches", trim.batches},
            {"changes", trim.policy_changes},
            {"recent_changes", to_json(trim.recent_changes)}};
}

nlohmann::json trim_memory() {
    const uint64_t heap_rss_before = read_smaps().heap_rss_bytes;
    const std::optional<rcu::TrimResult> result = rcu::trim_now();
    if (!result) {
        throw std::runtime_error(
            std::string("trimming is not supported by this build (allocator ") +
            rcu::allocator_name() + ", malloc_trim compiled out)");
    }
    return {{"heap_bytes_released", result->heap_bytes_released},
            {"rss_bytes_released", result->rss_bytes_released},
            {"duration_ns", result->duration.count()},
            {"heap_rss_before", heap_rss_before},
            {"heap_rss_after", read_smaps().heap_rss_bytes}};
}

}  // namespace mvmm::api
