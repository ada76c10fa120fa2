// Guest RAM backends: maps the memory a RamConfig asks for (anonymous, memfd, hugetlb, a file
// under a hugetlbfs mount) at the guest-physical ranges a machine lays out, binds it to a host
// NUMA node and preallocates it.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>

#include "base/user_error.h"
#include "mem/guest_addr.h"
#include "mem/guest_memory.h"
#include "mem/prealloc.h"
#include "mem/ram_config.h"

namespace mvmm {

// Where the machine puts guest RAM, e.g. below the PCI hole under 4 GiB and the rest above.
struct RamRange {
    GuestAddr base;
    uint64_t size = 0;
};

// The host cannot give what the configuration asks for; the message says what is missing
// and, where it can, how to get it.
class RamError : public UserError {
  public:
    using UserError::UserError;
};

// Maps one region per range, all from one backing (one memfd or file, at consecutive
// offsets), and preallocates them when config.prealloc is set, with config.prealloc_threads
// threads or default_prealloc_threads(guest_cpus).  `progress` hears from preallocation.
// Throws RamError when the host cannot provide the memory (hugepages or memory short, path
// not a hugetlbfs mount, no such NUMA node, a range not whole pages) and std::invalid_argument
// when the layout does not add up to config.size.  Running out of memory or hugepages is
// such an error, never a SIGBUS; nothing stays mapped after a throw.
GuestMemory allocate_guest_ram(const RamConfig& config, std::span<const RamRange> layout,
                               unsigned guest_cpus, PreallocObserver* progress = nullptr);

// What allocate_guest_ram checks before it maps anything, for a command line to be refused
// before a VM exists: throws the same errors, touches nothing.
void check_guest_ram(const RamConfig& config, std::span<const RamRange> layout);

// A /proc/meminfo field ("MemAvailable") in bytes; 0 when there is no such field.
uint64_t meminfo_bytes(std::string_view field);

}  // namespace mvmm
