// What the user asked for with --memory: size, page kind, sharing, preallocation, NUMA node.
// Parsing looks at no host state; allocate_guest_ram() checks the request against the host.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mem/prealloc.h"

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

// Parses "size=8G[,hugepages=2M|1G][,shared=on][,path=DIR][,prealloc=on][,prealloc-threads=N]
// [,prealloc-method=touch|populate][,host-node=N]".  A first item without '=' is the size, so
// "512M" alone means size=512M.  Sizes take a K, M, G or T suffix (powers of 1024); a bare
// number is MiB, as in QEMU's -m.  Throws std::invalid_argument naming the bad key or value.
RamConfig parse_ram_config(std::string_view option);

// "512M" -> 536870912.  Throws std::invalid_argument.
uint64_t parse_size(std::string_view text);

// 536870912 -> "512 MiB", 1610612736 -> "1.5 GiB": for messages.
std::string format_size(uint64_t bytes);

// The host's base page size.
uint64_t base_page_size();
// 2 MiB, 1 GiB, or base_page_size() for HugePages::none.
uint64_t page_size_of(HugePages hugepages);

}  // namespace mvmm
