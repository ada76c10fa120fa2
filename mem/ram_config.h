// What guest RAM is made of: size, page kind, sharing, preallocation, NUMA node.  vmm/ parses
// --memory into it (vmm/options.h) and checks what needs no host state (a size that is a whole
// number of pages, prealloc-* only with prealloc); allocate_guest_ram() checks it against the
// host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mem/prealloc.h"

#include "base/format_size.h"

namespace mvmm {

enum class HugePages {
    none,  // the host's base pages (or, with `path`, whatever the mount under it uses)
    size_2m,
    size_1g,
};

struct RamConfig {
    uint64_t size = 0;  // bytes
    HugePages hugepages = HugePages::none;
    bool shared = false;  // MAP_SHARED: a memfd, or the file under `path`
    std::string path{};   // a directory (a hugetlbfs mount) for an unlinked backing file
    bool prealloc = false;
    unsigned prealloc_threads = 0;  // 0: default_prealloc_threads(guest CPUs)
    PreallocMethod prealloc_method = PreallocMethod::populate;
    std::optional<unsigned> host_node{};  // bind guest RAM to this host NUMA node

    bool operator==(const RamConfig&) const = default;
};

// The host's base page size.
uint64_t base_page_size();
// 2 MiB, 1 GiB, or base_page_size() for HugePages::none.
uint64_t page_size_of(HugePages hugepages);

}  // namespace mvmm
