#include "vmm/report/process_memory.h"

#include <gtest/gtest.h>

#include <sstream>

#include "rcu/trim.h"

namespace mvmm::api {

// Readable failures: gtest finds these by argument-dependent lookup.
void PrintTo(const SmapsTotals& totals, std::ostream* out) {
    *out << "{heap_rss " << totals.heap_rss_bytes << ", heap_size " << totals.heap_size_bytes
         << ", anon_rss " << totals.anon_rss_bytes << "}";
}

void PrintTo(const StatusTotals& totals, std::ostream* out) {
    *out << "{vm_rss " << totals.vm_rss_bytes << ", vm_hwm " << totals.vm_hwm_bytes << "}";
}

namespace {

constexpr uint64_t kKiB = 1024;

// Abridged /proc/self/smaps: a file mapping, the heap, an unnamed anonymous mapping, a named
// one, a thread stack, a shared anonymous mapping and the vDSO.
constexpr const char* kSmaps =
    R"(55d0c2a00000-55d0c2a4e000 r-xp 00000000 fd:01 1835011                    /usr/bin/mvmm
Size:                312 kB
Rss:                 300 kB
Pss:                 300 kB
VmFlags: rd ex mr mw me dw sd
55d0c2a4e000-55d0c2a6f000 rw-p 00000000 00:00 0                          [heap]
Size:                132 kB
KernelPageSize:        4 kB
Rss:                 120 kB
Pss:                 120 kB
Anonymous:           120 kB
VmFlags: rd wr mr mw me ac sd
7f1c00000000-7f1c04000000 rw-p 00000000 00:00 0 
Size:              65536 kB
Rss:                2048 kB
VmFlags: rd wr mr mw me nr sd
7f1c10000000-7f1c10001000 rw-p 00000000 00:00 0                          [anon:glibc: malloc arena]
Size:                  4 kB
Rss:                   4 kB
7ffd5e1e0000-7ffd5e201000 rw-p 00000000 00:00 0                          [stack]
Size:                132 kB
Rss:                  16 kB
7f1c20000000-7f1c20100000 rw-s 00000000 00:01 2049                       /dev/zero (deleted)
Size:               1024 kB
Rss:                1024 kB
7f1c30000000-7f1c30100000 rw-s 00000000 00:00 0 
Size:               1024 kB
Rss:                 512 kB
7ffd5e3f0000-7ffd5e3f2000 r-xp 00000000 00:00 0                          [vdso]
Size:                  8 kB
Rss:                   8 kB
)";

SmapsTotals smaps_of(const std::string& text) {
    std::istringstream smaps(text);
    return parse_smaps(smaps);
}

StatusTotals status_of(const std::string& text) {
    std::istringstream status(text);
    return parse_status(status);
}

TEST(ParseSmaps, HeapAndAnonymousPrivateMappings) {
    // heap + unnamed + named anonymous + stack; not the file, shared or vDSO mappings.
    EXPECT_EQ(smaps_of(kSmaps),
              (SmapsTotals{120 * kKiB, 132 * kKiB, (120 + 2048 + 4 + 16) * kKiB}));
}

TEST(ParseSmaps, NoHeapMeansZeros) {
    EXPECT_EQ(smaps_of("7f1c00000000-7f1c04000000 r--p 00000000 fd:01 42   /usr/lib/libc.so.6\n"
                       "Size:  100 kB\nRss:  50 kB\n"),
              SmapsTotals{});
}

TEST(ParseSmaps, GarbageGivesZeros) {
    EXPECT_EQ(smaps_of("Rss: lots\nhello world\n\n-- rw-p 0 0 0 [heap]\nRss: 5 kB\n"),
              SmapsTotals{});
}

TEST(ParseStatus, ResidentSetAndPeak) {
    EXPECT_EQ(status_of("Name:\tmvmm\nVmPeak:\t  900000 kB\nVmSize:\t  800000 kB\n"
                        "VmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\nRssAnon:\t    1000 kB\n"
                        "Threads:\t4\n"),
              (StatusTotals{4096 * kKiB, 5120 * kKiB}));
}

TEST(ParseStatus, MissingFieldsAreZero) {
    EXPECT_EQ(status_of("Name:\tkthreadd\nVmRSS:\n"), StatusTotals{});
}

TEST(ProcessMemory, ThisProcess) {
    const StatusTotals status = read_status();
    EXPECT_GT(status.vm_rss_bytes, 0u);
    EXPECT_GE(status.vm_hwm_bytes, status.vm_rss_bytes);
    const SmapsTotals smaps = read_smaps();
    EXPECT_GT(smaps.anon_rss_bytes, 0u);
    EXPECT_GE(smaps.anon_rss_bytes, smaps.heap_rss_bytes);
    EXPECT_GE(smaps.heap_size_bytes, smaps.heap_rss_bytes);
}

}  // namespace
}  // namespace mvmm::api
