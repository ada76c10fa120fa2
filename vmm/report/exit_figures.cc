#include "vmm/report/exit_figures.h"

#include <fmt/format.h>

#include <map>

#include "vmm/api/memory_commands.h"
#include "vmm/kvm/kvm.h"
#include "vmm/report/process_clock.h"

namespace mvmm {

namespace {

uint64_t total(const std::vector<std::pair<std::string, uint64_t>>& counts) {
    uint64_t sum = 0;
    for (const auto& [_, n] : counts) sum += n;
    return sum;
}

uint64_t minus_guest(uint64_t bytes, uint64_t guest) {
    return bytes - std::min(bytes, guest);
}

nlohmann::json memory_json(const ExitFigures& f) {
    const auto& p = f.process;
    const uint64_t guest = f.machine ? f.machine->guest_resident_bytes : 0;
    return {{"peak_rss_bytes", p.status.vm_hwm_bytes},
            {"rss_bytes", p.status.vm_rss_bytes},
            {"guest_resident_bytes", f.machine ? nlohmann::json(guest) : nullptr},
            {"vmm_peak_rss_bytes", minus_guest(p.status.vm_hwm_bytes, guest)},
            {"vmm_rss_bytes", minus_guest(p.status.vm_rss_bytes, guest)},
            {"anon_rss_bytes", p.smaps.anon_rss_bytes},
            {"heap_at_exit",
             {{"rss_bytes", p.smaps.heap_rss_bytes}, {"size_bytes", p.smaps.heap_size_bytes}}}};
}

nlohmann::json trim_json(const rcu::TrimStats& trim) {
    auto by_policy = api::to_json(trim.by_policy);
    const uint64_t trims = std::max<uint64_t>(trim.by_policy.trims, 1);
    by_policy["heap_bytes_released_per_trim"] = trim.by_policy.heap_bytes_released / trims;
    by_policy["rss_bytes_released_per_trim"] = trim.by_policy.rss_bytes_released / trims;
    return {{"supported", trim.supported},
            {"policy", rcu::to_string(trim.config.policy)},
            {"factor", trim.config.factor},
            {"by_policy", by_policy},
            {"on_demand", api::to_json(trim.on_demand)},
            {"policy_changes", api::to_json(trim.recent_changes)}};
}

nlohmann::json address_space_json(const AddressSpaceStats& stats) {
    return {{"rebuilds", stats.rebuilds},
            {"rebuild_ns", stats.rebuild_time.count()},
            {"regions", stats.by_region.size()}};
}

nlohmann::json exits_json(const MachineFigures& m) {
    std::map<std::string, uint64_t> by_device;  // sorted by name, regions that answered any
    for (const auto* space : {&m.mmio, &m.pio})
        for (const auto& r : space->by_region)
            if (r.accesses) by_device[r.name] += r.accesses;
    nlohmann::json by_kind = nlohmann::json::object();
    for (const auto& [kind, n] : m.exits_by_kind) by_kind[kind] = n;
    return {{"total", total(m.exits_by_kind)},
            {"by_kind", by_kind},
            {"by_device", by_device},
            {"unclaimed", {{"mmio", m.mmio.unclaimed}, {"pio", m.pio.unclaimed}}}};
}

template <class T>
nlohmann::json or_null(const std::optional<T>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::optional<int64_t> since_start(std::optional<std::chrono::steady_clock::time_point> t) {
    if (!t) return std::nullopt;
    return ns_since_start(*t);
}

// Each device's queue pools, and their sums.  Heap allocations are counted only where a
// program installs an allocation counter (tools/request-bench); mvmm does not: null.
nlohmann::json request_allocation_json(const MachineFigures& m) {
    uint64_t slots = 0, peak = 0, resident = 0;
    nlohmann::json devices = nlohmann::json::array();
    for (const auto& device : m.devices) {
        nlohmann::json queues = nlohmann::json::array();
        for (const auto& q : device.statistics.queues) {
            slots += q.slots;
            peak += q.peak_slots_in_use;
            resident += q.pool_resident_bytes;
            queues.push_back({{"queue", q.queue},
                              {"slots", q.slots},
                              {"peak_slots_in_use", q.peak_slots_in_use},
                              {"pool_resident_bytes", q.pool_resident_bytes},
                              {"heap_allocations", or_null(q.heap_allocations)}});
        }
        devices.push_back({{"name", device.name}, {"queues", queues}});
    }
    return {{"mode", to_string(m.request_alloc)},
            {"slots", slots},
            {"peak_slots_in_use", peak},
            {"pool_resident_bytes", resident},
            {"devices", devices}};
}

nlohmann::json cache_json(const devices::block::CacheStats::Cache& cache) {
    return {{"resident_bytes", cache.bytes_resident},
            {"allocated_bytes", cache.bytes_allocated},
            {"entries", cache.entries},
            {"capacity", cache.capacity},
            {"hits", cache.hits},
            {"misses", cache.misses},
            {"evictions", cache.evictions},
            {"cleanings", cache.cleanings}};
}

}  // namespace

ImageCacheFigures read_image_cache_figures(const devices::block::DiskImage& image) {
    return {image.path(), image.format(), image.cache_stats()};
}

nlohmann::json disk_caches_json(const std::vector<ImageCacheFigures>& images) {
    nlohmann::json list = nlohmann::json::array();
    uint64_t resident = 0, allocated = 0;
    for (const auto& image : images) {
        const auto& c = image.caches;
        resident += c.l2.bytes_resident + c.refcount.bytes_resident;
        allocated += c.l2.bytes_allocated + c.refcount.bytes_allocated;
        list.push_back({{"path", image.path},
                        {"format", devices::block::to_string(image.format)},
                        {"l2", cache_json(c.l2)},
                        {"refcount", cache_json(c.refcount)}});
    }
    return {{"resident_bytes", resident}, {"allocated_bytes", allocated}, {"images", list}};
}

std::vector<std::pair<std::string, uint64_t>> VmExitCounts::by_kind() const {
    std::vector<std::pair<std::string, uint64_t>> found;
    for (size_t reason = 0; reason < counts_.size(); ++reason) {
        const uint64_t n = counts_[reason].load(std::memory_order_relaxed);
        if (!n) continue;
        const char* name = kvm_exit_name(static_cast<uint32_t>(reason));
        found.emplace_back(reason == kOther ? "other"
                           : name           ? name
                                            : "reason_" + std::to_string(reason),
                           n);
    }
    return found;
}

ProcessFigures read_process_figures() {
    return {api::read_status(), api::read_smaps(), rcu::trim_stats()};
}

std::string exit_stats_line(const ExitFigures& figures) {
    const auto& p = figures.process;
    const MachineFigures none{};
    const MachineFigures& m = figures.machine ? *figures.machine : none;
    const uint64_t guest = m.guest_resident_bytes;
    auto kib = [](uint64_t bytes) { return bytes >> 10; };
    return fmt::format(
        "peak_rss_kib={} vmm_rss_kib={} vmm_peak_rss_kib={} guest_resident_kib={} "
        "heap_rss_kib={} heap_size_kib={} trims={} trim_ns={} trim_policy={} rcu_batches={} "
        "rcu_callbacks={} gsi_routing_pushes={} vm_exits={} as_rebuilds={} as_rebuild_ns={}",
        kib(p.status.vm_hwm_bytes), kib(minus_guest(p.status.vm_rss_bytes, guest)),
        kib(minus_guest(p.status.vm_hwm_bytes, guest)), kib(guest), kib(p.smaps.heap_rss_bytes),
        kib(p.smaps.heap_size_bytes), p.trim.by_policy.trims, p.trim.by_policy.time.count(),
        rcu::to_string(p.trim.config.policy), p.trim.batches, p.trim.callbacks,
        m.gsi_routing_pushes, total(m.exits_by_kind), m.mmio.rebuilds + m.pio.rebuilds,
        (m.mmio.rebuild_time + m.pio.rebuild_time).count());
}

nlohmann::json figures_json(const ExitFigures& figures) {
    const auto& m = figures.machine;
    return {{"memory", memory_json(figures)},
            {"trim", trim_json(figures.process.trim)},
            {"rcu",
             {{"batches", figures.process.trim.batches},
              {"callbacks", figures.process.trim.callbacks}}},
            {"address_spaces", m ? nlohmann::json{{"mmio", address_space_json(m->mmio)},
                                                  {"pio", address_space_json(m->pio)}}
                                 : nlohmann::json(nullptr)},
            {"vm_exits", m ? exits_json(*m) : nlohmann::json(nullptr)},
            {"gsi_routing_pushes", m ? nlohmann::json(m->gsi_routing_pushes) : nullptr},
            {"request_allocation", m ? request_allocation_json(*m) : nlohmann::json(nullptr)},
            {"disk_caches", m ? disk_caches_json(m->disk_caches) : nlohmann::json(nullptr)}};
}

nlohmann::json device_timeline_json(const ExitFigures& figures) {
    nlohmann::json devices = nlohmann::json::array();
    if (!figures.machine) return devices;
    for (const auto& device : figures.machine->devices)
        devices.push_back({{"name", device.name},
                           {"driver_ok", or_null(since_start(device.statistics.driver_ok))},
                           {"first_notify", or_null(since_start(device.statistics.first_notify))}});
    return devices;
}

}  // namespace mvmm
