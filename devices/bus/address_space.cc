#include "devices/bus/address_space.h"

#include <algorithm>
#include <stdexcept>

namespace mvmm {

template <class Addr>
AddressSpace<Addr>::AddressSpace() : view_(std::make_unique<FlatView>()) {}

template <class Addr>
AddressSpace<Addr>::~AddressSpace() = default;

template <class Addr>
RegionId AddressSpace<Addr>::add(Addr base, uint64_t size, std::shared_ptr<IoHandler> handler,
                                 std::string name) {
    if (size == 0 || !base.checked_add(size - 1))
        throw std::invalid_argument("bad I/O region " + name);
    std::lock_guard lock(writer_mutex_);
    RegionId id = next_id_++;
    regions_.push_back({id, base.value(), size, true, std::move(handler), std::move(name)});
    rebuild();
    return id;
}

template <class Addr>
void AddressSpace<Addr>::update(RegionId id, Addr base, bool enabled) {
    std::lock_guard lock(writer_mutex_);
    auto it = std::find_if(regions_.begin(), regions_.end(), [&](auto& r) { return r.id == id; });
    if (it == regions_.end()) throw std::invalid_argument("unknown I/O region");
    if (it->base == base.value() && it->enabled == enabled) return;
    // A region whose end would wrap cannot decode; treat it as disabled.
    it->base = base.value();
    it->enabled = enabled && base.checked_add(it->size - 1).has_value();
    // Moving a region puts it on top, like a fresh mapping.
    std::rotate(it, it + 1, regions_.end());
    rebuild();
}

template <class Addr>
void AddressSpace<Addr>::remove(RegionId id) {
    std::lock_guard lock(writer_mutex_);
    std::erase_if(regions_, [&](auto& r) { return r.id == id; });
    rebuild();
}

template <class Addr>
std::vector<typename AddressSpace<Addr>::FlatRange> AddressSpace<Addr>::render(
    const std::vector<Region>& regions) {
    std::vector<FlatRange> flat;
    for (const Region& r : regions) {
        if (!r.enabled) continue;
        uint64_t start = r.base;
        uint64_t end = r.base + r.size;  // may be 0 when the region ends at the top: clip
        if (end == 0) end = ~uint64_t{0};
        // Clip whatever lies under the new region; keep what sticks out on either side.
        std::vector<FlatRange> next;
        next.reserve(flat.size() + 2);
        for (auto& f : flat) {
            if (f.end <= start || f.start >= end) {
                next.push_back(std::move(f));
                continue;
            }
            if (f.start < start)
                next.push_back({f.start, start, f.region_base, f.handler, f.accesses});
            if (f.end > end) next.push_back({end, f.end, f.region_base, f.handler, f.accesses});
        }
        next.push_back({start, end, r.base, r.handler, r.accesses});
        flat = std::move(next);
    }
    std::sort(flat.begin(), flat.end(), [](auto& a, auto& b) { return a.start < b.start; });
    return flat;
}

template <class Addr>
void AddressSpace<Addr>::rebuild() {
    const auto started = std::chrono::steady_clock::now();
    auto view = std::make_unique<FlatView>();
    view->ranges = render(regions_);
    view->generation = ++generation_;
    view_.publish(std::move(view));
    rebuild_time_ += std::chrono::steady_clock::now() - started;
}

template <class Addr>
const typename AddressSpace<Addr>::FlatRange* AddressSpace<Addr>::lookup(const FlatView& view,
                                                                         uint64_t addr,
                                                                         uint64_t len) const {
    auto it = std::upper_bound(view.ranges.begin(), view.ranges.end(), addr,
                               [](uint64_t a, const FlatRange& f) { return a < f.start; });
    if (it == view.ranges.begin()) return nullptr;
    const FlatRange& f = *std::prev(it);
    if (addr >= f.end || len > f.end - addr) return nullptr;
    return &f;
}

template <class Addr>
template <class Access>
bool AddressSpace<Addr>::dispatch(Addr addr, uint64_t len, Access&& access) const {
    // No bus cycle has zero bytes; devices may assume at least one (data[0], offset + n - 1).
    if (len == 0) return false;
    std::shared_ptr<IoHandler> handler;  // keeps the device alive if it is unmapped meanwhile
    uint64_t offset;
    {
        rcu::ReadGuard guard;
        const FlatRange* f = lookup(*view_.load(), addr.value(), len);
        if (!f) {
            unclaimed_.fetch_add(1, std::memory_order_relaxed);
            return false;
        }
        f->accesses->fetch_add(1, std::memory_order_relaxed);
        handler = f->handler;
        offset = addr.value() - f->region_base;
    }
    access(*handler, offset);
    return true;
}

template <class Addr>
bool AddressSpace<Addr>::read(Addr addr, std::span<uint8_t> data) const {
    return dispatch(addr, data.size(), [&](IoHandler& h, uint64_t off) { h.read(off, data); });
}

template <class Addr>
bool AddressSpace<Addr>::write(Addr addr, std::span<const uint8_t> data) const {
    return dispatch(addr, data.size(), [&](IoHandler& h, uint64_t off) { h.write(off, data); });
}

template <class Addr>
uint64_t AddressSpace<Addr>::generation() const noexcept {
    rcu::ReadGuard guard;
    return view_.load()->generation;
}

template <class Addr>
AddressSpaceStats AddressSpace<Addr>::stats() const {
    std::lock_guard lock(writer_mutex_);
    AddressSpaceStats stats{generation_, rebuild_time_, unclaimed_.load(), {}};
    for (const Region& r : regions_) stats.by_region.push_back({r.name, r.accesses->load()});
    return stats;
}

template class AddressSpace<GuestAddr>;
template class AddressSpace<PioPort>;

}  // namespace mvmm
