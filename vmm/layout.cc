#include "vmm/layout.h"

#include <algorithm>

namespace mvmm::layout {

std::vector<RamRange> ram_ranges(uint64_t size) {
    std::vector<RamRange> ranges;
    uint64_t low = std::min(size, kLowRamMaxEnd.value());
    ranges.push_back({GuestAddr(0), low});
    if (size > low) ranges.push_back({k4GiB, size - low});
    return ranges;
}

GuestAddr pci_mmio64_start(uint64_t ram_size) {
    const auto ranges = ram_ranges(ram_size);
    uint64_t end = std::max(ranges.back().base.value() + ranges.back().size, k4GiB.value());
    constexpr uint64_t kAlign = 1ull << 30;
    return GuestAddr((end + kAlign - 1) & ~(kAlign - 1));
}

}  // namespace mvmm::layout
