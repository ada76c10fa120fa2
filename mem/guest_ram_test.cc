// Guest RAM on base pages: anonymous, memfd, a file, NUMA binding, and the checks.  The
// hugepage backends, which resize the host's pools, are in hugepages_test.cc.
#include "mem/guest_ram.h"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "mem/ram_test_util.h"

namespace mvmm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

std::string ram_error_of(const RamConfig& config, std::span<const RamRange> layout) {
    try {
        allocate_guest_ram(config, layout, 2);
    } catch (const RamError& e) {
        return e.what();
    }
    return "no RamError";
}

// The offsets at which /proc/self/maps shows `name` mapped, sorted.
std::vector<uint64_t> mapped_offsets(const std::string& name) {
    std::ifstream maps("/proc/self/maps");
    std::vector<uint64_t> offsets;
    for (std::string line; std::getline(maps, line);) {
        if (line.find(name) == std::string::npos) continue;
        std::istringstream fields(line);
        std::string range, perms;
        uint64_t offset = 0;
        fields >> range >> perms >> std::hex >> offset;
        offsets.push_back(offset);
    }
    std::sort(offsets.begin(), offsets.end());
    return offsets;
}

TEST(GuestRam, PreallocatesAnonymousRamBelowAndAbove4G) {
    const std::vector<RamRange> layout{{GuestAddr(0), 768 * MiB}, {GuestAddr(4 * GiB), 256 * MiB}};
    const GuestMemory memory =
        allocate_guest_ram(RamConfig{.size = GiB, .prealloc = true}, layout, 2);

    ASSERT_EQ(memory.regions().size(), 2u);
    for (const RamRegion& region : memory.regions()) {
        EXPECT_EQ(resident_bytes(region.mapping.bytes()), region.size());
        // Aligned so that the host can back the guest's 2 MiB pages with huge pages.
        EXPECT_EQ(reinterpret_cast<uintptr_t>(region.mapping.bytes().data()) % (2 * MiB), 0u);
    }
    EXPECT_EQ(memory.regions()[1].base, GuestAddr(4 * GiB));
    ASSERT_TRUE(memory.write<uint64_t>(GuestAddr(4 * GiB + 256 * MiB - 8), 0x1234).ok());
    EXPECT_EQ(memory.read<uint64_t>(GuestAddr(4 * GiB + 256 * MiB - 8)).value(), 0x1234u);
    EXPECT_FALSE(memory.contains(GuestAddr(768 * MiB), 1));
}

TEST(GuestRam, NothingIsResidentWithoutPrealloc) {
    const RamRange layout[] = {{GuestAddr(0), 64 * MiB}};
    const GuestMemory memory = allocate_guest_ram(RamConfig{.size = 64 * MiB}, layout, 2);
    EXPECT_EQ(resident_bytes(memory.regions()[0].mapping.bytes()), 0u);
}

TEST(GuestRam, SharedRamIsOneMemfdAtConsecutiveOffsets) {
    const RamRange layout[] = {{GuestAddr(0), 128 * MiB}, {GuestAddr(4 * GiB), 64 * MiB}};
    const GuestMemory memory = allocate_guest_ram(
        RamConfig{.size = 192 * MiB, .shared = true, .prealloc = true}, layout, 2);
    EXPECT_EQ(mapped_offsets("memfd:mvmm-guest-ram"), (std::vector<uint64_t>{0, 128 * MiB}));
    EXPECT_EQ(resident_bytes(memory.regions()[1].mapping.bytes()), 64 * MiB);
}

TEST(GuestRam, FileUnderPath) {
    const RamRange layout[] = {{GuestAddr(0), 32 * MiB}};
    const GuestMemory memory =
        allocate_guest_ram(RamConfig{.size = 32 * MiB,
                                     .shared = true,
                                     .path = "/dev/shm",
                                     .prealloc = true,
                                     .prealloc_method = PreallocMethod::touch},
                           layout, 2);
    EXPECT_EQ(mapped_offsets("/dev/shm/").size(), 1u) << "an unlinked file in /dev/shm";
    EXPECT_EQ(resident_bytes(memory.regions()[0].mapping.bytes()), 32 * MiB);
}

TEST(GuestRam, ReportsPreallocProgress) {
    struct Recorder : PreallocObserver {
        void update(const PreallocProgress& progress) override { last = progress; }
        PreallocProgress last;
    } recorder;
    const RamRange layout[] = {{GuestAddr(0), 16 * MiB}};
    const GuestMemory memory =
        allocate_guest_ram(RamConfig{.size = 16 * MiB, .prealloc = true}, layout, 2, &recorder);
    EXPECT_TRUE(recorder.last.finished);
    EXPECT_EQ(recorder.last.done_bytes, 16 * MiB);
}

TEST(GuestRam, BindsToAHostNode) {
    const RamRange layout[] = {{GuestAddr(0), 16 * MiB}};
    const GuestMemory memory = allocate_guest_ram(
        RamConfig{.size = 16 * MiB, .prealloc = true, .host_node = 0u}, layout, 2);
    int policy = -1;
    unsigned long nodes = 0;
    ASSERT_EQ(::syscall(SYS_get_mempolicy, &policy, &nodes, sizeof nodes * 8,
                        memory.regions()[0].mapping.bytes().data(), MPOL_F_ADDR),
              0);
    EXPECT_EQ(policy, MPOL_BIND);
    EXPECT_EQ(nodes, 1ul);
}

TEST(GuestRam, NoSuchHostNode) {
    const RamRange layout[] = {{GuestAddr(0), 16 * MiB}};
    EXPECT_THAT(ram_error_of(RamConfig{.size = 16 * MiB, .host_node = 1000u}, layout),
                HasSubstr("host-node=1000: this host has no NUMA node 1000 (its nodes: 0"));
}

TEST(GuestRam, NotEnoughMemoryToPreallocate) {
    const RamRange layout[] = {{GuestAddr(0), 64ull << 40}};
    EXPECT_THAT(ram_error_of(RamConfig{.size = 64ull << 40, .prealloc = true}, layout),
                HasSubstr("not enough memory to preallocate 64 TiB of guest RAM: "));
}

TEST(GuestRam, HugepagesNeedAHugetlbfsPath) {
    const RamRange layout[] = {{GuestAddr(0), 64 * MiB}};
    EXPECT_THAT(
        ram_error_of(
            RamConfig{.size = 64 * MiB, .hugepages = HugePages::size_2m, .path = "/dev/shm"},
            layout),
        HasSubstr("path=/dev/shm is not a hugetlbfs mount; mount one with: mount -t "
                  "hugetlbfs -o pagesize=2M none /dev/shm"));
    EXPECT_THAT(ram_error_of(RamConfig{.size = 64 * MiB, .path = "/no/such/dir"}, layout),
                HasSubstr("path=/no/such/dir: No such file or directory"));
}

TEST(GuestRam, RangesMustBeWholePages) {
    const RamRange layout[] = {{GuestAddr(0), 63 * MiB}, {GuestAddr(4 * GiB), 1 * MiB}};
    EXPECT_THAT(ram_error_of(RamConfig{.size = 64 * MiB, .hugepages = HugePages::size_2m}, layout),
                HasSubstr("the guest RAM range at 0 MiB is 63 MiB, not a whole number of 2 MiB "
                          "pages"));
}

TEST(GuestRam, LayoutMustAddUpAndNotOverlap) {
    const RamRange short_layout[] = {{GuestAddr(0), 32 * MiB}};
    EXPECT_THROW(allocate_guest_ram(RamConfig{.size = 64 * MiB}, short_layout, 2),
                 std::invalid_argument);
    const RamRange overlapping[] = {{GuestAddr(0), 32 * MiB}, {GuestAddr(16 * MiB), 32 * MiB}};
    EXPECT_THROW(allocate_guest_ram(RamConfig{.size = 64 * MiB}, overlapping, 2),
                 std::invalid_argument);
}

}  // namespace
}  // namespace mvmm
