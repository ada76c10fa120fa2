// The engine's own behaviour on images qemu-img makes: threads, growth, snapshots, locks,
// the caches' options and cleaning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <random>
#include <thread>

#include "devices/block/qcow2/format.h"
#include "devices/block/qcow2/qcow2_image.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using namespace testing;
using ::testing::AnyOfArray;
using ::testing::HasSubstr;

class Qcow2ImageTest : public ::testing::Test {
  protected:
    void SetUp() override { SKIP_WITHOUT_QEMU_IMG(); }
    std::string create(const std::string& name, const std::string& options, uint64_t size) {
        const std::string path = dir_.file(name);
        must("qemu-img create -q -f qcow2 -o " + options + " " + path + " " + std::to_string(size));
        return path;
    }
    std::vector<uint8_t> as_raw(const std::string& path, const std::string& extra = "") {
        must("qemu-img convert " + extra + " -O raw " + path + " " + path + ".raw");
        return file_bytes(path + ".raw");
    }
    void expect_clean(const std::string& path) {
        const RunResult check = qemu_img_check(path);
        EXPECT_EQ(check.status, 0) << "qemu-img check " << path << ":\n" << check.output;
    }
    static std::string open_error(const std::string& path, bool read_only = false) {
        try {
            Qcow2Image::open(path, read_only);
        } catch (const ImageError& e) {
            return e.what();
        }
        return "";
    }

    ScratchDir dir_;
};

TEST_F(Qcow2ImageTest, ThreadsAllocatingTheSameClustersLeakNothing) {
    // Four threads start on each cluster together (a barrier) and write every fourth sector of
    // it: one allocates the cluster (copying the rest from the backing file) while the others
    // wait for it, then write in place.  A second allocation would leak a cluster and lose data.
    const uint64_t size = 4 << 20, cluster = 65536, sector = 512, threads = 4;
    const std::string base = dir_.file("base.raw");
    write_file_bytes(base, 0, std::vector<uint8_t>(size, 0x33));
    const std::string path =
        create("top.qcow2", "cluster_size=65536,backing_file=base.raw,backing_fmt=raw", size);
    {
        const auto image = Qcow2Image::open(path, false);
        std::barrier start(threads);
        std::vector<std::thread> writers;
        for (uint64_t t = 0; t < threads; ++t) {
            writers.emplace_back([&, t] {
                for (uint64_t c = 0; c < size; c += cluster) {
                    start.arrive_and_wait();
                    for (uint64_t s = c + t * sector; s < c + cluster; s += threads * sector)
                        ASSERT_TRUE(write_bytes(*image, s, pattern(sector, 1, s)));
                    (void)read_bytes(*image, (c * 7 + t * cluster) % size, sector);
                }
            });
        }
        for (auto& writer : writers) writer.join();
    }
    expect_clean(path);  // no leaked cluster either
    EXPECT_TRUE(as_raw(path) == pattern(size, 1));
}

TEST_F(Qcow2ImageTest, GrowsTheRefcountStructuresAsTheFileGrows) {
    // 512-byte clusters: the one-cluster refcount table qemu-img makes counts 8 MiB of file at
    // 16 bits, 2 MiB at 64 bits, 128 MiB at 1 bit (which tests the sub-byte path only).
    const std::pair<std::string, uint64_t> variants[] = {
        {"16", 10 << 20}, {"64", 3 << 20}, {"1", 2 << 20}};
    for (const auto& [refcount_bits, size] : variants) {
        SCOPED_TRACE("refcount_bits=" + refcount_bits);
        const std::string path = create("grow-" + refcount_bits + ".qcow2",
                                        "cluster_size=512,refcount_bits=" + refcount_bits, size);
        const auto data = pattern(size, 2);
        {
            const auto image = Qcow2Image::open(path, false);
            for (uint64_t at = 0; at < size; at += 1 << 20)
                ASSERT_TRUE(write_bytes(
                    *image, at, std::vector(data.begin() + at, data.begin() + at + (1 << 20))));
            EXPECT_TRUE(read_bytes(*image, 0, size) == data);
        }
        expect_clean(path);
        EXPECT_TRUE(as_raw(path) == data);
        const uint32_t table_clusters = load_be32(file_bytes(path, 56, 4), 0);
        if (refcount_bits != "1") {
            EXPECT_GT(table_clusters, 1u) << "the table grew";
        }
    }
}

// Where qemu-img map says guest `offset` lies in the file (0: nowhere); -U: we may hold it open.
uint64_t host_offset_of(const std::string& path, uint64_t offset) {
    const std::string map = must("qemu-img map -U --output=json " + path);
    const size_t line = map.find("\"start\": " + std::to_string(offset) + ",");
    const size_t field = map.find("\"offset\": ", line);
    if (line == std::string::npos || field == std::string::npos || field > map.find('}', line))
        return 0;
    return std::stoull(map.substr(field + 10));
}

TEST_F(Qcow2ImageTest, FreedClustersWaitForTheFlushThatDropsTheirLastReference) {
    // Until the cleared L2 entry is on disk, the file still points at the freed cluster: new
    // data there would show through it after a crash.
    const std::string path = create("reuse.qcow2", "cluster_size=65536", 4 << 20);
    const auto image = Qcow2Image::open(path, false);
    ASSERT_TRUE(write_bytes(*image, 0, pattern(65536, 1)));
    ASSERT_TRUE(image->flush());
    const uint64_t freed = host_offset_of(path, 0);
    ASSERT_NE(freed, 0u);
    ASSERT_TRUE(image->discard(0, 65536));
    ASSERT_TRUE(write_bytes(*image, 65536, pattern(65536, 2)));
    ASSERT_TRUE(image->flush());
    EXPECT_NE(host_offset_of(path, 65536), freed) << "not before the flush";
    ASSERT_TRUE(write_bytes(*image, 2 * 65536, pattern(65536, 3)));
    ASSERT_TRUE(image->flush());
    EXPECT_EQ(host_offset_of(path, 2 * 65536), freed) << "reused after it";
}

TEST_F(Qcow2ImageTest, FreeingMoreThanTheQuarantineHoldsWritesTheTablesOnTheWay) {
    // 80 Ki clusters of 512 bytes freed without a flush: past 64 Ki the tables are written so
    // the first ones can be reused.
    const uint64_t size = 40 << 20;
    const std::string path = create("many.qcow2", "cluster_size=512", size);
    const auto data = pattern(size, 4);
    uint64_t full = 0;
    {
        const auto image = Qcow2Image::open(path, false);
        ASSERT_TRUE(write_bytes(*image, 0, data));
        ASSERT_TRUE(image->flush());
        full = file_bytes(path).size();
        ASSERT_TRUE(image->discard(0, size));
        ASSERT_TRUE(write_bytes(*image, 0, data));
    }
    EXPECT_LT(file_bytes(path).size(), full + full / 4) << "most freed clusters were reused";
    expect_clean(path);
    EXPECT_TRUE(as_raw(path) == data);
}

TEST_F(Qcow2ImageTest, ARefcountDropReachesTheFileOnlyAfterTheL2TableThatDroppedIt) {
    // 512-byte clusters: a refcount block counts 256 clusters (128 KiB of file), the refcount
    // cache holds 4 blocks and the L2 cache 2 tables of 64 entries.  After each request the
    // file is what a kill would leave: leaked clusters at worst.
    const uint64_t cluster = 512, size = 1 << 20;
    const std::string path = create("order.qcow2", "cluster_size=512", size);
    const auto image = Qcow2Image::open(path, false, {.l2_cache_size = 2 * cluster});
    ASSERT_TRUE(write_bytes(*image, 0, pattern(size, 5)));
    ASSERT_TRUE(image->flush());
    auto check = [&](const std::string& after, const std::vector<int>& allowed = {0, 3}) {
        const RunResult check = run("qemu-img check -q -U " + path);
        EXPECT_THAT(check.status, AnyOfArray(allowed))
            << "after " << after << ", qemu-img check says:\n"
            << check.output;
    };
    // Guest cluster g lies near host cluster g + g / 64: these are in refcount blocks 0 to 4.
    // The first four fill the refcount cache with blocks that wait for their L2 tables.
    for (const uint64_t guest : {10, 300, 550, 800}) {
        ASSERT_TRUE(image->discard(guest * cluster, cluster));
        check("discarding guest cluster " + std::to_string(guest));
    }
    // The fifth block's load writes one of them, and so every dirty L2 table before it, in the
    // middle of the discard: the dependency is spent then, and must not be before the entry
    // that drops guest cluster 1100 has changed.
    const uint64_t evictions = image->cache_stats().refcount.evictions;
    ASSERT_TRUE(image->discard(1100 * cluster, cluster));
    check("discarding guest cluster 1100");
    ASSERT_GT(image->cache_stats().refcount.evictions, evictions) << "the scenario changed";
    // Writes into other L2 tables, that table kept in the cache by a read, write the dirty
    // refcount blocks before the table the second write evicts.
    ASSERT_TRUE(write_bytes(*image, 10 * cluster, pattern(cluster, 6)));
    check("writing guest cluster 10");
    (void)read_bytes(*image, 1100 * cluster, cluster);
    ASSERT_TRUE(write_bytes(*image, 300 * cluster, pattern(cluster, 7)));
    check("writing guest cluster 300");
    ASSERT_TRUE(image->flush());
    check("the flush", {0});
}

TEST_F(Qcow2ImageTest, ZeroingWhatAlreadyReadsAsZeroesAllocatesNothing) {
    const std::string path = create("zero.qcow2", "cluster_size=65536", 1 << 30);
    const uint64_t file_size = file_bytes(path).size();
    {
        const auto image = Qcow2Image::open(path, false);
        ASSERT_TRUE(image->write_zeroes(0, 1 << 30, false));
        ASSERT_TRUE(image->discard(0, 1 << 30));
        EXPECT_EQ(read_bytes(*image, 512 << 20, 4096), std::vector<uint8_t>(4096, 0));
    }
    EXPECT_EQ(file_bytes(path).size(), file_size) << "no L2 table to say it again";
    expect_clean(path);
}

TEST_F(Qcow2ImageTest, WritesCopyClustersAndTablesSharedWithASnapshot) {
    const uint64_t size = 2 << 20;
    const std::string path = create("snap.qcow2", "cluster_size=4096", size);
    must("qemu-io -f qcow2 -c 'write -P 0x11 0 1M' " + path);
    must("qemu-img snapshot -c before " + path);
    std::vector<uint8_t> now(size, 0);
    std::fill_n(now.begin(), 1 << 20, 0x11);
    {
        const auto image = Qcow2Image::open(path, false);
        const auto data = pattern(10000, 3, 5000);
        ASSERT_TRUE(write_bytes(*image, 5000, data));
        std::ranges::copy(data, now.begin() + 5000);
        ASSERT_TRUE(image->discard(64 << 10, 64 << 10));
        std::fill_n(now.begin() + (64 << 10), 64 << 10, 0);
    }
    expect_clean(path);
    EXPECT_TRUE(as_raw(path) == now);
    std::vector<uint8_t> before(size, 0);
    std::fill_n(before.begin(), 1 << 20, 0x11);
    EXPECT_TRUE(as_raw(path, "-l snapshot.name=before") == before) << "the snapshot is intact";
}

TEST_F(Qcow2ImageTest, LocksLikeARawDisk) {
    const std::string base = create("base.qcow2", "cluster_size=65536", 1 << 20);
    const std::string top =
        create("top.qcow2", "backing_file=base.qcow2,backing_fmt=qcow2", 1 << 20);
    const auto writer = Qcow2Image::open(top, false);
    EXPECT_THAT(open_error(top), HasSubstr("is in use"));
    EXPECT_THAT(open_error(top, true), HasSubstr("is in use"));
    EXPECT_THAT(open_error(base), HasSubstr("is in use")) << "a backing file is locked shared";
    EXPECT_EQ(open_error(base, true), "") << "and may be shared";
}

TEST_F(Qcow2ImageTest, SaysWhatIsWrongWithTheFile) {
    EXPECT_THAT(open_error(dir_.file("missing")), HasSubstr("No such file"));
    EXPECT_THAT(open_error(dir_.path()), HasSubstr("Is a directory"));
    EXPECT_THAT(open_error(dir_.path(), true),
                HasSubstr("neither a regular file nor a block device"));
    write_file_bytes(dir_.file("raw.img"), 0, std::vector<uint8_t>(4096, 1));
    EXPECT_EQ(open_error(dir_.file("raw.img")),
              "disk image " + dir_.file("raw.img") + ": not a qcow2 image (no QFI\\xfb magic)");
    const std::string top = dir_.file("top.qcow2");
    must("qemu-img create -q -f qcow2 -u -b gone.qcow2 -F qcow2 " + top + " 1M");
    EXPECT_THAT(open_error(top),
                HasSubstr(": backing file " + dir_.file("gone.qcow2") + ": cannot open"));
}

// A loop device over a file (losetup: root, and a /dev that shows new loop nodes), detached
// when it goes; path() is empty when none could be attached, and why() says why.
class LoopDevice {
  public:
    explicit LoopDevice(const std::string& file) {
        const RunResult attached = run("losetup --find --show " + file);
        if (attached.status == 0)
            path_ = attached.output.substr(0, attached.output.find('\n'));
        else
            why_ = attached.output;
    }
    ~LoopDevice() {
        if (!path_.empty()) run("losetup --detach " + path_);
    }
    LoopDevice(const LoopDevice&) = delete;
    LoopDevice& operator=(const LoopDevice&) = delete;

    const std::string& path() const { return path_; }
    const std::string& why() const { return why_; }

  private:
    std::string path_, why_;
};

// Writes pattern(..., seed) from the start in 64 KiB pieces until one fails or the disk is full:
// the bytes written, and how the last write ended.
struct Filled {
    uint64_t written = 0;
    IoResult last = Ok{};
};
Filled fill(const Qcow2Image& image, uint64_t seed) {
    constexpr uint64_t kChunk = 65536;
    Filled filled;
    for (; filled.written < image.size(); filled.written += kChunk) {
        filled.last = write_bytes(image, filled.written, pattern(kChunk, seed, filled.written));
        if (!filled.last) break;
    }
    return filled;
}

TEST_F(Qcow2ImageTest, OnABlockDeviceAllocatesInsideItAndRunsOutOfSpaceAtItsEnd) {
    constexpr uint64_t kSize = 16 << 20;
    const std::string path = create("disk.qcow2", "cluster_size=65536", kSize);
    must("truncate -s 1M " + path);  // a device of 1 MiB: room for a few clusters
    uint64_t written = 0;
    {
        const LoopDevice device(path);
        if (device.path().empty()) GTEST_SKIP() << "no loop device here: " << device.why();
        const auto image = Qcow2Image::open(device.path(), false);
        EXPECT_EQ(image->size(), kSize) << "the image's size, not the device's";
        Filled filled = fill(*image, 5);
        written = filled.written;
        ASSERT_FALSE(filled.last) << "16 MiB of clusters fit in a 1 MiB device";
        EXPECT_EQ(filled.last.error(), std::make_error_code(std::errc::no_space_on_device));
        ASSERT_GT(written, 0u);
        EXPECT_EQ(read_bytes(*image, 0, written), pattern(written, 5));
        EXPECT_TRUE(image->flush());
    }
    expect_clean(path);
    EXPECT_EQ(as_raw(path), [&] {
        auto expected = pattern(written, 5);
        expected.resize(kSize, 0);
        return expected;
    }());
}

// With 512-byte clusters the one-cluster refcount table qemu-img makes covers 8 MiB: filling a
// 16 MiB device grows the table, inside the device (where the old table's reach ends), not past
// its end, so nearly all of the device holds data.
TEST_F(Qcow2ImageTest, OnABlockDeviceGrowsTheRefcountTableInsideIt) {
    const std::string path = create("small.qcow2", "cluster_size=512", 32 << 20);
    must("truncate -s 16M " + path);
    uint64_t written = 0;
    {
        const LoopDevice device(path);
        if (device.path().empty()) GTEST_SKIP() << "no loop device here: " << device.why();
        const auto image = Qcow2Image::open(device.path(), false);
        Filled filled = fill(*image, 7);
        written = filled.written;
        ASSERT_FALSE(filled.last) << "32 MiB of clusters fit in a 16 MiB device";
        EXPECT_EQ(filled.last.error(), std::make_error_code(std::errc::no_space_on_device));
        EXPECT_GT(written, 14u << 20) << "the refcount table could not grow inside the device";
        EXPECT_EQ(read_bytes(*image, 0, written), pattern(written, 7));
        EXPECT_TRUE(image->flush());
    }
    expect_clean(path);
    const auto raw = as_raw(path);
    EXPECT_TRUE(std::equal(raw.begin(), raw.begin() + written, pattern(written, 7).begin()));
}

TEST_F(Qcow2ImageTest, AReadOnlyImageRefusesChanges) {
    const std::string path = create("ro.qcow2", "cluster_size=65536", 1 << 20);
    const auto image = Qcow2Image::open(path, true);
    EXPECT_EQ(write_bytes(*image, 0, std::vector<uint8_t>(512, 1)).error(),
              std::errc::read_only_file_system);
    EXPECT_FALSE(image->discard(0, 65536));
    EXPECT_FALSE(image->write_zeroes(0, 65536, true));
    EXPECT_TRUE(image->flush());
    EXPECT_FALSE(write_bytes(*image, 1 << 20, std::vector<uint8_t>(512, 1))) << "past the end";
}

TEST_F(Qcow2ImageTest, SizesTheCachesAsQemuDoes) {
    // The L2 cache covers the whole disk up to l2_cache_size; the refcount cache four clusters.
    const std::string small = create("small.qcow2", "cluster_size=65536", 1ull << 30);
    EXPECT_EQ(Qcow2Image::open(small, true)->cache_stats().l2.capacity,
              2u);  // 128 KiB of L2 entries
    const std::string medium = create("medium.qcow2", "cluster_size=65536", 100ull << 30);
    EXPECT_EQ(Qcow2Image::open(medium, true)->cache_stats().l2.capacity, 200u);  // 12.5 MiB
    const std::string big = create("big.qcow2", "cluster_size=65536", 1ull << 40);
    const auto image = Qcow2Image::open(big, true);
    EXPECT_EQ(image->cache_stats().l2.capacity, 512u) << "32 MiB";
    EXPECT_EQ(image->cache_stats().refcount.capacity, 4u);
    const auto limited =
        Qcow2Image::open(big, true, {.l2_cache_size = 4 << 20, .refcount_cache_size = 1 << 20});
    EXPECT_EQ(limited->cache_stats().l2.capacity, 64u);
    EXPECT_EQ(limited->cache_stats().refcount.capacity, 16u);
}

TEST_F(Qcow2ImageTest, CleaningDropsTablesIdleForAnIntervalOfTheOwnersClock) {
    // 4 KiB clusters: each L2 table maps 2 MiB; 32 MiB needs 16 of them.
    const uint64_t size = 32 << 20;
    const std::string path =
        create("clean.qcow2", "cluster_size=4096,preallocation=metadata", size);
    for (const CacheAlloc alloc : {CacheAlloc::Mapping, CacheAlloc::Heap}) {
        const auto image = Qcow2Image::open(
            path, true, {.cache_clean_interval = std::chrono::seconds(10), .cache_alloc = alloc});
        for (uint64_t at = 0; at < size; at += 2 << 20) (void)read_bytes(*image, at, 512);
        EXPECT_EQ(image->cache_stats().l2.entries, 16u);
        EXPECT_EQ(image->cache_stats().l2.bytes_resident, 16u * 4096);
        const auto start = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
        EXPECT_EQ(image->clean_idle(start), 0u) << "starts the clock";
        (void)read_bytes(*image, 0, 512);
        EXPECT_EQ(image->clean_idle(start + std::chrono::seconds(9)), 0u) << "too early";
        EXPECT_EQ(image->clean_idle(start + std::chrono::seconds(10)), 15u) << "all but one";
        EXPECT_EQ(image->cache_stats().l2.bytes_resident, 4096u);
        EXPECT_EQ(image->cache_stats().l2.cleanings, 15u);
    }
}

}  // namespace
}  // namespace mvmm::devices::block::qcow2
