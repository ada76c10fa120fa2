#include "mem/guest_ram.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mempolicy.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/fd.h"
#include "base/result.h"
#include "mem/hugepages.h"

namespace mvmm {

namespace {

// Where guest RAM comes from, once the configuration has met the host.
struct Backing {
    uint64_t page_size;
    bool hugetlb;
};

std::string errno_text(int error = errno) {
    return std::strerror(error);
}

// "not enough 2 MiB hugepages: need 256 (512 MiB), 12 free; reserve them with
// echo 500 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
std::string hugepage_shortage(uint64_t page_size, uint64_t needed, std::optional<unsigned> node) {
    const HugepageCounts counts = read_hugepage_counts(page_size, node).value_or(HugepageCounts{});
    const uint64_t available = counts.available();
    std::string message = "not enough " + format_size(page_size) + " hugepages" +
                          (node ? " on host node " + std::to_string(*node) : "") + ": need " +
                          std::to_string(needed) + " (" + format_size(needed * page_size) + "), " +
                          std::to_string(available) + " free";
    if (available >= needed)
        return message +
               " (the pool has enough: a hugetlbfs size= limit, a cgroup hugetlb limit or "
               "another process is in the way)";
    return message + "; reserve them with echo " +
           std::to_string(counts.total + needed - available) + " > " +
           hugepage_pool_dir(page_size, node) + "/nr_hugepages";
}

// Hugepages are reserved when they are mapped, so a short pool would fail the mmap anyway;
// checking first gives the message that says what to do.  The node pools are only counted
// here: a NUMA binding is the case where a reservation does not prevent SIGBUS on touch.
void check_hugepages(uint64_t page_size, uint64_t needed, std::optional<unsigned> node) {
    const auto counts = read_hugepage_counts(page_size);
    if (!counts) throw RamError("this host has no " + format_size(page_size) + " hugepages");
    if (counts->available() < needed) throw RamError(hugepage_shortage(page_size, needed, {}));
    if (node) {
        const auto node_counts = read_hugepage_counts(page_size, node);
        if (node_counts && node_counts->free < needed)
            throw RamError(hugepage_shortage(page_size, needed, node));
    }
}

// Without this check a short host finishes preallocation through the OOM killer.
void check_memory(uint64_t needed) {
    const uint64_t available = meminfo_bytes("MemAvailable") + meminfo_bytes("SwapFree");
    if (needed > available)
        throw RamError("not enough memory to preallocate " + format_size(needed) +
                       " of guest RAM: " + format_size(available) + " available");
}

void check_node(unsigned node) {
    if (std::filesystem::exists("/sys/devices/system/node/node" + std::to_string(node))) return;
    std::ifstream online("/sys/devices/system/node/online");
    std::string nodes;
    std::getline(online, nodes);
    throw RamError("host-node=" + std::to_string(node) + ": this host has no NUMA node " +
                   std::to_string(node) + " (its nodes: " + nodes + ")");
}

// The page size comes from hugepages=, or from the hugetlbfs mount under path=.
Backing resolve_backing(const RamConfig& config) {
    const bool asked_hugepages = config.hugepages != HugePages::none;
    const uint64_t asked_page_size = page_size_of(config.hugepages);
    if (config.path.empty()) return {asked_page_size, asked_hugepages};

    struct statfs fs {};
    if (::statfs(config.path.c_str(), &fs) != 0 || ::access(config.path.c_str(), W_OK) != 0)
        throw RamError("path=" + config.path + ": " + errno_text());
    if (fs.f_type == HUGETLBFS_MAGIC) {
        const auto mount_page_size = static_cast<uint64_t>(fs.f_bsize);
        if (asked_hugepages && mount_page_size != asked_page_size)
            throw RamError("path=" + config.path + " is a hugetlbfs mount of " +
                           format_size(mount_page_size) + " pages, but hugepages= asks for " +
                           format_size(asked_page_size) + " pages");
        return {mount_page_size, true};
    }
    if (asked_hugepages)
        throw RamError(
            "path=" + config.path + " is not a hugetlbfs mount; mount one with: mount -t " +
            "hugetlbfs -o pagesize=" + (config.hugepages == HugePages::size_1g ? "1G" : "2M") +
            " none " + config.path);
    return {base_page_size(), false};
}

void check_layout(const RamConfig& config, std::span<const RamRange> layout, uint64_t page_size) {
    uint64_t total = 0;
    for (const RamRange& range : layout) {
        if (range.size == 0 || range.size % page_size != 0)
            throw RamError("the guest RAM range at " + std::to_string(range.base.value() >> 20) +
                           " MiB is " + format_size(range.size) + ", not a whole number of " +
                           format_size(page_size) + " pages; choose another size");
        total += range.size;
    }
    if (total != config.size)
        throw std::invalid_argument("the guest RAM layout covers " + format_size(total) +
                                    " but the configuration asks for " + format_size(config.size));
}

// MAP_HUGE_2MB and MFD_HUGE_2MB alike: log2 of the page size, shifted into place.
unsigned huge_size_flag(uint64_t page_size) {
    return static_cast<unsigned>(std::countr_zero(page_size)) << MAP_HUGE_SHIFT;
}

// An unlinked file in path=, or a memfd for shared=on, or nothing for private anonymous memory.
Fd open_backing_file(const RamConfig& config, const Backing& backing) {
    Fd file;
    if (!config.path.empty()) {
        file = Fd(::open(config.path.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
        if (!file.valid())
            throw RamError("cannot create a guest RAM file in path=" + config.path + ": " +
                           errno_text());
    } else if (config.shared) {
        const unsigned flags =
            MFD_CLOEXEC | (backing.hugetlb ? MFD_HUGETLB | huge_size_flag(backing.page_size) : 0);
        file = Fd(::memfd_create("mvmm-guest-ram", flags));
        if (!file.valid()) throw RamError("cannot create a memfd for guest RAM: " + errno_text());
    } else {
        return file;
    }
    if (::ftruncate(file.get(), static_cast<off_t>(config.size)) != 0)
        throw RamError("cannot size the guest RAM file to " + format_size(config.size) + ": " +
                       errno_text());
    return file;
}

int map_flags(const RamConfig& config, const Backing& backing, const Fd& file) {
    if (file.valid()) return config.shared ? MAP_SHARED : MAP_PRIVATE;
    return MAP_PRIVATE | MAP_ANONYMOUS |
           (backing.hugetlb ? MAP_HUGETLB | static_cast<int>(huge_size_flag(backing.page_size))
                            : 0);
}

// Maps at an address aligned to `align`: KVM maps a guest page huge only when the host
// address agrees with the guest address modulo the huge page size.  Reserves room for an
// aligned start, maps over it and gives back both ends.  Fails with errno.
Result<Mapping, int> map_aligned(uint64_t size, uint64_t align, int flags, int fd,
                                 uint64_t offset) {
    const uint64_t room = size + align;
    void* reserved =
        ::mmap(nullptr, room, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) return Unexpected{errno};
    const auto base = reinterpret_cast<uintptr_t>(reserved);
    const uintptr_t start = (base + align - 1) & ~(align - 1);
    void* mapped = ::mmap(reinterpret_cast<void*>(start), size, PROT_READ | PROT_WRITE,
                          flags | MAP_FIXED, fd, static_cast<off_t>(offset));
    if (mapped == MAP_FAILED) {
        const int error = errno;
        ::munmap(reserved, room);
        return Unexpected{error};
    }
    if (start > base) ::munmap(reserved, start - base);
    if (const uintptr_t end = start + size; end < base + room)
        ::munmap(reinterpret_cast<void*>(end), base + room - end);
    return Mapping(mapped, size);
}

void bind_to_node(std::span<uint8_t> area, unsigned node) {
    constexpr unsigned bits = sizeof(unsigned long) * CHAR_BIT;
    std::vector<unsigned long> mask(node / bits + 1);
    mask[node / bits] = 1ul << (node % bits);
    // The kernel reads maxnode - 1 bits of the mask.
    if (::syscall(SYS_mbind, area.data(), area.size(), MPOL_BIND, mask.data(),
                  mask.size() * bits + 1, 0) != 0)
        throw RamError("cannot bind guest RAM to host node " + std::to_string(node) + ": " +
                       errno_text());
}

GuestMemory map_ranges(const RamConfig& config, std::span<const RamRange> layout,
                       const Backing& backing) {
    const Fd file = open_backing_file(config, backing);
    const int flags = map_flags(config, backing, file);
    const uint64_t align = std::max<uint64_t>(backing.page_size, 2ull << 20);
    std::vector<RamRegion> regions;
    uint64_t offset = 0;
    for (const RamRange& range : layout) {
        auto mapping = map_aligned(range.size, align, flags, file.get(), offset);
        if (!mapping && backing.hugetlb && mapping.error() == ENOMEM)
            throw RamError(hugepage_shortage(backing.page_size, config.size / backing.page_size,
                                             config.host_node));
        if (!mapping)
            throw RamError("cannot map " + format_size(range.size) +
                           " of guest RAM: " + errno_text(mapping.error()));
        // Transparent huge pages where hugetlb is not used, as QEMU does: fewer faults and
        // fewer TLB misses for the guest.  Hosts with THP off refuse; that is fine.
        if (!backing.hugetlb) ::madvise(mapping->bytes().data(), range.size, MADV_HUGEPAGE);
        if (config.host_node) bind_to_node(mapping->bytes(), *config.host_node);
        regions.push_back({range.base, std::move(*mapping)});
        offset += range.size;
    }
    return GuestMemory(std::move(regions));
}

std::string explain(const PreallocError& error, const RamConfig& config, const Backing& backing) {
    if (backing.hugetlb)
        return hugepage_shortage(backing.page_size, config.size / backing.page_size,
                                 config.host_node);
    if (error.error() == ENOMEM)
        return "not enough memory to preallocate " + format_size(config.size) +
               " of guest RAM: ran out after " + format_size(error.done_bytes());
    return error.what();
}

// The backing, once the host is known to be able to provide it.
Backing checked_backing(const RamConfig& config, std::span<const RamRange> layout) {
    const Backing backing = resolve_backing(config);
    check_layout(config, layout, backing.page_size);
    if (config.host_node) check_node(*config.host_node);
    if (backing.hugetlb)
        check_hugepages(backing.page_size, config.size / backing.page_size, config.host_node);
    else if (config.prealloc)
        check_memory(config.size);
    return backing;
}

}  // namespace

uint64_t meminfo_bytes(std::string_view field) {
    std::ifstream in("/proc/meminfo");
    std::string name;
    uint64_t kib = 0;
    while (in >> name >> kib) {
        if (name.size() == field.size() + 1 && name.starts_with(field)) return kib << 10;
        in.ignore(INT_MAX, '\n');
    }
    return 0;
}

void check_guest_ram(const RamConfig& config, std::span<const RamRange> layout) {
    (void)checked_backing(config, layout);
}

GuestMemory allocate_guest_ram(const RamConfig& config, std::span<const RamRange> layout,
                               unsigned guest_cpus, PreallocObserver* progress) {
    const Backing backing = checked_backing(config, layout);
    try {
        GuestMemory memory = map_ranges(config, layout, backing);
        if (config.prealloc) {
            std::vector<std::span<uint8_t>> areas;
            for (const RamRegion& region : memory.regions())
                areas.push_back(region.mapping.bytes());
            const unsigned threads = config.prealloc_threads ? config.prealloc_threads
                                                             : default_prealloc_threads(guest_cpus);
            prealloc(areas, {backing.page_size, threads, config.prealloc_method}, progress);
        }
        return memory;
    } catch (const PreallocError& error) {
        // The memory is unmapped by now, so the counts in the message are the host's own.
        throw RamError(explain(error, config, backing));
    }
}

}  // namespace mvmm
