#include "mem/hugepages.h"

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "mem/ram_config.h"

namespace mvmm {

namespace {

std::optional<uint64_t> read_counter(const std::string& dir, const char* name) {
    std::ifstream in(dir + "/" + name);
    uint64_t value = 0;
    if (!(in >> value)) return std::nullopt;
    return value;
}

bool write_total(uint64_t page_size, uint64_t pages) {
    std::ofstream out(hugepage_pool_dir(page_size) + "/nr_hugepages");
    out << pages << std::flush;
    return static_cast<bool>(out);
}

}  // namespace

std::string hugepage_pool_dir(uint64_t page_size, std::optional<unsigned> node) {
    const std::string pool = "hugepages-" + std::to_string(page_size >> 10) + "kB";
    if (node) return "/sys/devices/system/node/node" + std::to_string(*node) + "/hugepages/" + pool;
    return "/sys/kernel/mm/hugepages/" + pool;
}

std::optional<HugepageCounts> read_hugepage_counts(uint64_t page_size,
                                                   std::optional<unsigned> node) {
    const std::string dir = hugepage_pool_dir(page_size, node);
    const auto total = read_counter(dir, "nr_hugepages");
    if (!total) return std::nullopt;
    return HugepageCounts{.total = *total,
                          .free = read_counter(dir, "free_hugepages").value_or(0),
                          .reserved = read_counter(dir, "resv_hugepages").value_or(0),
                          .overcommit = read_counter(dir, "nr_overcommit_hugepages").value_or(0),
                          .surplus = read_counter(dir, "surplus_hugepages").value_or(0)};
}

HugepageReservation::HugepageReservation(uint64_t page_size, uint64_t pages)
    : page_size_(page_size) {
    const std::string what = std::to_string(pages) + " " + format_size(page_size) + " hugepages";
    const auto before = read_hugepage_counts(page_size);
    if (!before) throw std::runtime_error("cannot reserve " + what + ": the host has no such pool");
    previous_total_ = before->total;
    const uint64_t in_use = before->total - before->unreserved();
    if (!write_total(page_size, in_use + pages))
        throw std::runtime_error("cannot reserve " + what + ": no permission to write " +
                                 hugepage_pool_dir(page_size) + "/nr_hugepages");
    const auto after = read_hugepage_counts(page_size);
    if (!after || after->unreserved() != pages) {
        write_total(page_size, previous_total_);
        throw std::runtime_error("cannot reserve " + what + ": the kernel found only " +
                                 std::to_string(after ? after->free : 0) + " free");
    }
}

HugepageReservation::~HugepageReservation() {
    write_total(page_size_, previous_total_);
}

HugetlbfsMount::HugetlbfsMount(uint64_t page_size) {
    std::string dir = "/tmp/mvmm-hugetlbfs-XXXXXX";
    if (!::mkdtemp(dir.data()))
        throw std::runtime_error("cannot create a mount point: " +
                                 std::string(std::strerror(errno)));
    const std::string options = "pagesize=" + std::to_string(page_size >> 10) + "K";
    if (::mount("none", dir.c_str(), "hugetlbfs", 0, options.c_str()) != 0) {
        const int error = errno;
        ::rmdir(dir.c_str());
        throw std::runtime_error("cannot mount hugetlbfs on " + dir + ": " + std::strerror(error));
    }
    path_ = std::move(dir);
}

HugetlbfsMount::~HugetlbfsMount() {
    ::umount2(path_.c_str(), MNT_DETACH);
    ::rmdir(path_.c_str());
}

}  // namespace mvmm
