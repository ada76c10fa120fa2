// The kernel's hugepage pools, one per page size and NUMA node: what guest RAM checks before
// it maps hugepages, and what tests and benchmarks fill and give back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mvmm {

struct HugepageCounts {
    uint64_t total = 0;       // nr_hugepages: the pool's size
    uint64_t free = 0;        // free_hugepages, counting reserved ones
    uint64_t reserved = 0;    // resv_hugepages: promised to mappings, not faulted in yet
    uint64_t overcommit = 0;  // nr_overcommit_hugepages: how far the pool may grow on demand,
    uint64_t surplus = 0;     // surplus_hugepages: and how far it has grown
    uint64_t unreserved() const noexcept { return free > reserved ? free - reserved : 0; }
    // Pages a new mapping can still get (the node pools have no reservations or overcommit).
    uint64_t available() const noexcept {
        return unreserved() + (overcommit > surplus ? overcommit - surplus : 0);
    }
};

// "/sys/kernel/mm/hugepages/hugepages-2048kB", or for a node
// "/sys/devices/system/node/node0/hugepages/hugepages-2048kB".
std::string hugepage_pool_dir(uint64_t page_size, std::optional<unsigned> node = {});

// Empty when the host has no pool of that page size (or no such node).
std::optional<HugepageCounts> read_hugepage_counts(uint64_t page_size,
                                                   std::optional<unsigned> node = {});

// Resizes the pool of `page_size` pages so that exactly `pages` are free and unreserved, and
// puts the old size back when destroyed.  For tests and benchmarks; needs root.  Throws
// std::runtime_error when it cannot (no permission, memory too fragmented for that many).
class HugepageReservation {
  public:
    HugepageReservation(uint64_t page_size, uint64_t pages);
    ~HugepageReservation();
    HugepageReservation(const HugepageReservation&) = delete;
    HugepageReservation& operator=(const HugepageReservation&) = delete;

  private:
    uint64_t page_size_;
    uint64_t previous_total_;
};

// A hugetlbfs mount of `page_size` pages in a new temporary directory, unmounted and removed
// when destroyed.  For tests and benchmarks; needs root.  Throws std::runtime_error.
class HugetlbfsMount {
  public:
    explicit HugetlbfsMount(uint64_t page_size);
    ~HugetlbfsMount();
    HugetlbfsMount(const HugetlbfsMount&) = delete;
    HugetlbfsMount& operator=(const HugetlbfsMount&) = delete;

    const std::string& path() const noexcept { return path_; }

  private:
    std::string path_;
};

}  // namespace mvmm
