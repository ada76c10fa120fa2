#include "mem/guest_memory.h"

#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "base/fd.h"

namespace mvmm {

Mapping Mapping::anonymous(size_t size, int extra_flags) {
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
    if (p == MAP_FAILED) throw_errno("mmap of " + std::to_string(size) + " bytes");
    return Mapping(p, size);
}

uint64_t resident_bytes(std::span<const uint8_t> area) {
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> pages((area.size() + page - 1) / page);
    check_syscall(::mincore(const_cast<uint8_t*>(area.data()), area.size(), pages.data()),
                  "mincore");
    uint64_t resident = 0;
    for (unsigned char p : pages) resident += (p & 1) ? page : 0;
    return resident;
}

GuestMemory::GuestMemory(std::vector<RamRegion> regions) : regions_(std::move(regions)) {
    std::sort(regions_.begin(), regions_.end(),
              [](const RamRegion& a, const RamRegion& b) { return a.base < b.base; });
    for (size_t i = 0; i < regions_.size(); ++i) {
        if (!regions_[i].base.checked_add(regions_[i].size()))
            throw std::invalid_argument("guest RAM region wraps around the address space");
        if (i > 0 && regions_[i - 1].end() > regions_[i].base)
            throw std::invalid_argument("guest RAM regions overlap");
    }
}

Result<GuestSlice, MemError> GuestMemory::slice(GuestAddr addr, uint64_t len) const {
    auto end = addr.checked_add(len);
    if (!end) return Unexpected{MemError::Overflow};
    // The last region whose base is <= addr.
    auto it = std::upper_bound(regions_.begin(), regions_.end(), addr,
                               [](GuestAddr a, const RamRegion& r) { return a < r.base; });
    if (it == regions_.begin()) return Unexpected{MemError::OutOfRange};
    const RamRegion& r = *std::prev(it);
    if (*end > r.end()) return Unexpected{MemError::OutOfRange};
    return GuestSlice(r.mapping.bytes().subspan(addr - r.base, len));
}

Result<Ok, MemError> GuestMemory::read_bytes(GuestAddr addr, std::span<uint8_t> out) const {
    auto s = slice(addr, out.size());
    if (!s) return Unexpected{s.error()};
    return s->copy_to(0, out);
}

Result<Ok, MemError> GuestMemory::write_bytes(GuestAddr addr, std::span<const uint8_t> in) const {
    auto s = slice(addr, in.size());
    if (!s) return Unexpected{s.error()};
    return s->copy_from(0, in);
}

uint64_t GuestMemory::total_size() const noexcept {
    uint64_t total = 0;
    for (const auto& r : regions_) total += r.size();
    return total;
}

uint64_t GuestMemory::resident_bytes() const {
    uint64_t resident = 0;
    for (const auto& r : regions_) resident += mvmm::resident_bytes(r.mapping.bytes());
    return resident;
}

void GuestMemory::register_with_kvm(int vm_fd) const {
    uint32_t slot = 0;
    for (const auto& r : regions_) {
        kvm_userspace_memory_region region{};
        region.slot = slot++;
        region.guest_phys_addr = r.base.value();
        region.memory_size = r.size();
        region.userspace_addr = reinterpret_cast<uint64_t>(r.mapping.bytes().data());
        check_syscall(::ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &region),
                      "KVM_SET_USER_MEMORY_REGION");
    }
}

}  // namespace mvmm
