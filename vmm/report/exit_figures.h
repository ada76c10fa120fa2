// What a run of mvmm cost and did, read once at exit: the `exit stats` log line and the boot
// report's figures come from the same ExitFigures, so they always agree.
#pragma once

#include <linux/kvm.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/block/cache_stats.h"
#include "devices/block/disk_image.h"
#include "devices/bus/address_space.h"
#include "devices/virtio/queue_counters.h"
#include "rcu/trim.h"
#include "vmm/report/process_memory.h"

namespace mvmm {

// VM exits that reached mvmm (KVM_RUN returned), by KVM exit reason; exits KVM handles in the
// kernel are not seen.  Counted relaxed by the vCPU threads: figures, not synchronization.
class VmExitCounts {
  public:
    void count(uint32_t exit_reason) noexcept {
        counts_[std::min<size_t>(exit_reason, kOther)].fetch_add(1, std::memory_order_relaxed);
    }
    // {kind, count} of every kind seen: "io", "mmio", "intr", "shutdown", ... ("reason_N" for
    // reasons without a name here, "other" beyond the table).
    std::vector<std::pair<std::string, uint64_t>> by_kind() const;

  private:
    static constexpr size_t kOther = 64;
    std::array<std::atomic<uint64_t>, kOther + 1> counts_{};
};

// The process as a whole: what /proc and the allocator say, and the RCU call thread's counters.
struct ProcessFigures {
    api::StatusTotals status;
    api::SmapsTotals smaps;
    rcu::TrimStats trim;
};
ProcessFigures read_process_figures();

// A disk device (virtio-blk disk or SCSI controller) as dumps name it, and its statistics.
struct DeviceFigures {
    std::string name;
    devices::virtio::DeviceStatistics statistics;
};

// A disk image's metadata caches (qcow2's L2 and refcount tables with its backing chain's; a
// raw image has none), for the report and query-memory.
struct ImageCacheFigures {
    std::string path;
    devices::block::ImageFormat format;
    devices::block::CacheStats caches;
};
ImageCacheFigures read_image_cache_figures(const devices::block::DiskImage& image);

// What only a machine that was built can tell.
struct MachineFigures {
    uint64_t guest_resident_bytes = 0;  // guest RAM never shrinks: at exit this is its peak
    AddressSpaceStats mmio;
    AddressSpaceStats pio;
    std::vector<std::pair<std::string, uint64_t>> exits_by_kind;
    uint64_t gsi_routing_pushes = 0;              // KVM_SET_GSI_ROUTING calls
    SlotSource request_alloc = SlotSource::pool;  // where the disks' requests in flight live
    std::vector<DeviceFigures> devices;
    std::vector<ImageCacheFigures> disk_caches;  // every image of every disk device, in order
};

struct ExitFigures {
    ProcessFigures process;
    std::optional<MachineFigures> machine;  // absent when mvmm failed before the machine existed
};

// "peak_rss_kib=.. vmm_rss_kib=.. ... vm_exits=.. as_rebuilds=.." for the `exit stats` line.
std::string exit_stats_line(const ExitFigures& figures);

// The report's "memory", "trim", "rcu", "address_spaces", "vm_exits", "request_allocation" and
// "disk_caches" members (README.md, "Boot report").
nlohmann::json figures_json(const ExitFigures& figures);
// "disk_caches": per image its caches' resident and allocated bytes and entries, and the totals
// (README.md, "Boot report"; query-memory has the same).
nlohmann::json disk_caches_json(const std::vector<ImageCacheFigures>& images);
// The report's "timeline.devices": each disk device's DRIVER_OK and first notify.
nlohmann::json device_timeline_json(const ExitFigures& figures);

}  // namespace mvmm
