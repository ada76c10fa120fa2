// Guest RAM on hugepages.  These tests resize the host's hugepage pools (as root), give the
// pages back in every case, and skip with the reason when they cannot; meson runs them alone.
#include "mem/hugepages.h"

#include <linux/mman.h>
#include <sys/mman.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mem/guest_ram.h"
#include "mem/ram_test_util.h"

namespace mvmm {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;
constexpr uint64_t k2M = 2 * MiB;

// A HugepageReservation or HugetlbfsMount, or why there is none (not root, memory too
// fragmented), for the test to skip with.
template <class T>
std::pair<std::unique_ptr<T>, std::string> try_make(uint64_t page_size, uint64_t pages = 0) {
    try {
        if constexpr (std::is_same_v<T, HugepageReservation>)
            return {std::make_unique<T>(page_size, pages), ""};
        else
            return {std::make_unique<T>(page_size), ""};
    } catch (const std::runtime_error& e) {
        return {nullptr, e.what()};
    }
}

HugepageCounts counts(uint64_t page_size = k2M) {
    return read_hugepage_counts(page_size).value();
}

TEST(HugepageReservation, FillsThePoolAndGivesItBack) {
    const uint64_t total_before = counts().total;
    {
        const auto [reservation, why] = try_make<HugepageReservation>(k2M, 7);
        if (!reservation) GTEST_SKIP() << why;
        EXPECT_EQ(counts().unreserved(), 7u);
    }
    EXPECT_EQ(counts().total, total_before);
}

struct Backend {
    const char* name;
    bool shared;
    bool mount;  // put the file on a hugetlbfs mount of our own
};

class HugepageBackends : public testing::TestWithParam<std::tuple<Backend, PreallocMethod>> {};

TEST_P(HugepageBackends, Preallocates256MiBOf2MiBPages) {
    const auto& [backend, method] = GetParam();
    const auto [reservation, why] = try_make<HugepageReservation>(k2M, 128);
    if (!reservation) GTEST_SKIP() << why;
    RamConfig config{.size = 256 * MiB,
                     .hugepages = HugePages::size_2m,
                     .shared = backend.shared,
                     .prealloc = true,
                     .prealloc_method = method};
    std::unique_ptr<HugetlbfsMount> mount;
    if (backend.mount) {
        std::string why_not;
        std::tie(mount, why_not) = try_make<HugetlbfsMount>(k2M);
        if (!mount) GTEST_SKIP() << why_not;
        config.path = mount->path();
    }
    const RamRange layout[] = {{GuestAddr(0), 192 * MiB}, {GuestAddr(4 * GiB), 64 * MiB}};
    {
        const GuestMemory memory = allocate_guest_ram(config, layout, 2);
        EXPECT_EQ(counts().free, 0u) << "all 128 hugepages faulted in";
        EXPECT_EQ(counts().reserved, 0u);
        EXPECT_EQ(resident_bytes(memory.regions()[1].mapping.bytes()), 64 * MiB);
    }
    EXPECT_EQ(counts().unreserved(), 128u) << "all given back";
}

INSTANTIATE_TEST_SUITE_P(
    , HugepageBackends,
    testing::Combine(testing::Values(Backend{"anonymous", false, false},
                                     Backend{"memfd", true, false},
                                     Backend{"hugetlbfs_file", true, true},
                                     Backend{"private_hugetlbfs_file", false, true}),
                     testing::Values(PreallocMethod::touch, PreallocMethod::populate)),
    [](const auto& info) {
        return std::string(std::get<0>(info.param).name) +
               (std::get<1>(info.param) == PreallocMethod::touch ? "_touch" : "_populate");
    });

TEST(Hugepages, MappingReservesWithoutPrealloc) {
    const auto [reservation, why] = try_make<HugepageReservation>(k2M, 16);
    if (!reservation) GTEST_SKIP() << why;
    const RamRange layout[] = {{GuestAddr(0), 32 * MiB}};
    const GuestMemory memory =
        allocate_guest_ram(RamConfig{.size = 32 * MiB, .hugepages = HugePages::size_2m}, layout, 2);
    EXPECT_EQ(counts().reserved, 16u) << "the kernel reserves hugepages at mmap time";
    EXPECT_EQ(resident_bytes(memory.regions()[0].mapping.bytes()), 0u);
}

TEST(Hugepages, NotEnoughIsAClearError) {
    const auto [reservation, why] = try_make<HugepageReservation>(k2M, 12);
    if (!reservation) GTEST_SKIP() << why;
    const uint64_t total = counts().total;
    const RamRange layout[] = {{GuestAddr(0), 256 * MiB}};
    for (const RamConfig& config :
         {RamConfig{.size = 256 * MiB, .hugepages = HugePages::size_2m, .prealloc = true},
          RamConfig{.size = 256 * MiB, .hugepages = HugePages::size_2m, .shared = true}}) {
        try {
            allocate_guest_ram(config, layout, 2);
            ADD_FAILURE() << "no error, shared=" << config.shared;
        } catch (const RamError& e) {
            EXPECT_EQ(std::string(e.what()),
                      "not enough 2 MiB hugepages: need 128 (256 MiB), 12 free; reserve them with "
                      "echo " +
                          std::to_string(total + 116) +
                          " > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
        }
        EXPECT_EQ(counts().unreserved(), 12u) << "nothing left mapped";
    }
}

TEST(Hugepages, WrongMountPageSize) {
    const auto [mount, why] = try_make<HugetlbfsMount>(k2M);
    if (!mount) GTEST_SKIP() << why;
    const RamRange layout[] = {{GuestAddr(0), GiB}};
    try {
        allocate_guest_ram(
            RamConfig{.size = GiB, .hugepages = HugePages::size_1g, .path = mount->path()}, layout,
            2);
        FAIL() << "no error";
    } catch (const RamError& e) {
        EXPECT_THAT(e.what(), HasSubstr("is a hugetlbfs mount of 2 MiB pages, but hugepages= asks "
                                        "for 1 GiB pages"));
    }
}

// Past the reservation (MAP_NORESERVE here; a NUMA binding or a hugetlb cgroup limit in real
// life) the kernel answers a touch of a page it cannot back with SIGBUS: preallocation must
// turn that into an error, not die of it.
class ShortPool : public testing::TestWithParam<PreallocMethod> {};

TEST_P(ShortPool, SigbusBecomesAnError) {
    const auto [reservation, why] = try_make<HugepageReservation>(k2M, 2);
    if (!reservation) GTEST_SKIP() << why;
    void* p =
        ::mmap(nullptr, 4 * k2M, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB | MAP_NORESERVE, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const Mapping ram(p, 4 * k2M);
    try {
        prealloc(std::vector{ram.bytes()}, {.page_size = k2M, .threads = 1, .method = GetParam()});
        FAIL() << "no error";
    } catch (const PreallocError& e) {
        EXPECT_THAT(e.error(), AnyOf(EFAULT, ENOMEM));
        EXPECT_EQ(e.done_bytes(), 0u) << "the first chunk fails as a whole";
    }
    struct sigaction now {};
    ASSERT_EQ(::sigaction(SIGBUS, nullptr, &now), 0);
    EXPECT_EQ(now.sa_handler, SIG_DFL) << "the SIGBUS handler is put back";
}

INSTANTIATE_TEST_SUITE_P(, ShortPool,
                         testing::Values(PreallocMethod::touch, PreallocMethod::populate),
                         [](const auto& info) {
                             return info.param == PreallocMethod::touch ? "touch" : "populate";
                         });

TEST(Hugepages, OneGibPages) {
    const auto [reservation, why] = try_make<HugepageReservation>(GiB, 1);
    if (!reservation) GTEST_SKIP() << why;
    const RamRange layout[] = {{GuestAddr(0), GiB}};
    {
        const GuestMemory memory = allocate_guest_ram(
            RamConfig{.size = GiB, .hugepages = HugePages::size_1g, .prealloc = true}, layout, 2);
        EXPECT_EQ(counts(GiB).free, 0u);
    }
    EXPECT_EQ(counts(GiB).free, 1u);
}

}  // namespace
}  // namespace mvmm
