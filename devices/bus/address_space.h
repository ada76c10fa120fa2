// An address space (guest-physical MMIO or x86 port I/O) rendered to an immutable flat view:
// a sorted list of non-overlapping ranges, each pointing at the device that answers it.
// Every change (a device added, a BAR moved, a bridge window closed) renders a new view and
// publishes it with RCU; dispatch reads the current view under an RCU read guard with no lock,
// and the old view is freed by the RCU call thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "mem/guest_addr.h"
#include "rcu/rcu.h"

namespace mvmm {

// What a bus device implements.  `offset` is relative to the start of the device's range;
// accesses are 1, 2, 4 or 8 bytes for vCPU exits.
class IoHandler {
  public:
    virtual ~IoHandler() = default;
    virtual void read(uint64_t offset, std::span<uint8_t> data) = 0;
    virtual void write(uint64_t offset, std::span<const uint8_t> data) = 0;
};

using RegionId = uint64_t;

// What an address space did so far: for exit statistics and the boot report.
struct AddressSpaceStats {
    uint64_t rebuilds = 0;                    // views rendered and published
    std::chrono::nanoseconds rebuild_time{};  // spent rendering and publishing them
    uint64_t unclaimed = 0;                   // accesses no region answered
    struct RegionAccesses {
        std::string name;
        uint64_t accesses = 0;
    };
    std::vector<RegionAccesses> by_region;  // regions mapped now, with the accesses they answered
};

template <class Addr>
class AddressSpace {
  public:
    AddressSpace();
    ~AddressSpace();
    AddressSpace(const AddressSpace&) = delete;
    AddressSpace& operator=(const AddressSpace&) = delete;

    // Maps `handler` at [base, base + size).  A later mapping shadows an earlier one where
    // they overlap (guests briefly overlap BARs while sizing them).  Throws on size 0 or
    // a range that wraps around.
    RegionId add(Addr base, uint64_t size, std::shared_ptr<IoHandler> handler, std::string name);
    // Moves a region, or unmaps it while `enabled` is false (a BAR with decoding off).
    void update(RegionId id, Addr base, bool enabled);
    void remove(RegionId id);

    // Lock-free dispatch; false when nothing is mapped over the whole access, and for an
    // empty access, which never reaches a device.
    bool read(Addr addr, std::span<uint8_t> data) const;
    bool write(Addr addr, std::span<const uint8_t> data) const;

    // How many views were published so far (each one a grace period's worth of garbage).
    uint64_t generation() const noexcept;

    AddressSpaceStats stats() const;

    // Accesses a region answered; shared by its flat ranges in every view, counted relaxed.
    using AccessCounter = std::shared_ptr<std::atomic<uint64_t>>;
    struct Region {
        RegionId id;
        uint64_t base;
        uint64_t size;
        bool enabled;
        std::shared_ptr<IoHandler> handler;
        std::string name;
        AccessCounter accesses = std::make_shared<std::atomic<uint64_t>>(0);
    };
    struct FlatRange {
        uint64_t start;
        uint64_t end;  // exclusive
        uint64_t region_base;
        std::shared_ptr<IoHandler> handler;
        AccessCounter accesses;
    };
    struct FlatView {
        std::vector<FlatRange> ranges;
        uint64_t generation = 0;
    };

    // Renders regions (later ones on top) to sorted, non-overlapping ranges.
    static std::vector<FlatRange> render(const std::vector<Region>& regions);

  private:
    void rebuild();  // requires writer_mutex_
    const FlatRange* lookup(const FlatView& view, uint64_t addr, uint64_t len) const;
    template <class Access>
    bool dispatch(Addr addr, uint64_t len, Access&& access) const;

    mutable std::mutex writer_mutex_;
    std::vector<Region> regions_;
    RegionId next_id_ = 1;
    uint64_t generation_ = 0;
    std::chrono::nanoseconds rebuild_time_{};  // requires writer_mutex_
    mutable std::atomic<uint64_t> unclaimed_{0};
    rcu::Pointer<FlatView> view_;
};

using MmioSpace = AddressSpace<GuestAddr>;
using PioSpace = AddressSpace<PioPort>;

}  // namespace mvmm
