// Interoperability with QEMU: images qemu-img makes and qemu-io writes read back the same
// through the engine, and what the engine writes passes `qemu-img check` and converts to the
// same bytes.  Every format variant: versions 2 and 3, cluster sizes 512 B to 2 MiB.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "devices/block/qcow2/qcow2_image.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using namespace testing;
using ::testing::HasSubstr;

struct Variant {
    const char* compat;  // "0.10" is version 2
    uint64_t cluster_size;
};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
    return std::string(info.param.compat[0] == '0' ? "v2_" : "v3_") +
           std::to_string(info.param.cluster_size);
}

class Qcow2InteropTest : public ::testing::TestWithParam<Variant> {
  protected:
    void SetUp() override {
        SKIP_WITHOUT_QEMU_IMG();
#if defined(__SANITIZE_THREAD__)
        // Tens of MiB through qemu-img per test, one thread: half the TSan run's time for
        // nothing it looks for (the plain and ASan builds run them).
        if (GetParam().cluster_size > (64 << 10)) GTEST_SKIP() << "2 MiB clusters: not under TSan";
#endif
    }

    // A new image of `size` bytes in this test's variant, with extra qemu-img options.
    std::string create(const std::string& name, uint64_t size, const std::string& extra = "") {
        const std::string path = dir_.file(name);
        must("qemu-img create -q -f qcow2 -o compat=" + std::string(GetParam().compat) +
             ",cluster_size=" + std::to_string(GetParam().cluster_size) + extra + " " + path + " " +
             std::to_string(size));
        return path;
    }
    std::vector<uint8_t> as_raw(const std::string& path) {
        const std::string raw = path + ".raw";
        must("qemu-img convert -O raw " + path + " " + raw);
        return file_bytes(raw);
    }
    void expect_clean(const std::string& path) {
        const RunResult check = qemu_img_check(path);
        EXPECT_EQ(check.status, 0) << "qemu-img check " << path << ":\n" << check.output;
    }
    uint64_t cluster() const {
        return GetParam().cluster_size;
    }

    ScratchDir dir_;
};

TEST_P(Qcow2InteropTest, ReadsWhatQemuWrote) {
    const uint64_t size = 8 * cluster() + (4 << 20);
    const std::string path = create("disk.qcow2", size);
    must("qemu-io -f qcow2 -c 'write -P 0xab 1024 5000' -c 'write -P 0xcd " +
         std::to_string(3 * cluster() - 512) + " 4096' " + path);
    const auto image = Qcow2Image::open(path, true);
    EXPECT_EQ(image->size(), size);
    EXPECT_TRUE(image->read_only());
    EXPECT_EQ(image->path(), path);
    const auto disk = read_bytes(*image, 0, size);
    std::vector<uint8_t> want(size, 0);
    std::fill_n(want.begin() + 1024, 5000, 0xab);
    std::fill_n(want.begin() + 3 * cluster() - 512, 4096, 0xcd);
    EXPECT_TRUE(disk == want);
}

TEST_P(Qcow2InteropTest, WritesWhatQemuReadsAndChecksClean) {
    const uint64_t size = 6 * cluster() + (2 << 20);
    const std::string path = create("disk.qcow2", size);
    std::vector<uint8_t> model(size, 0);
    {
        const auto image = Qcow2Image::open(path, false);
        std::mt19937_64 random(cluster());
        for (int i = 0; i < 40; ++i) {
            const uint64_t length = 1 + random() % (2 * cluster() + 3000);
            const uint64_t offset = random() % (size - length);
            const auto data = pattern(length, i, offset);
            ASSERT_TRUE(write_bytes(*image, offset, data));
            std::copy(data.begin(), data.end(), model.begin() + offset);
        }
        EXPECT_TRUE(read_bytes(*image, 0, size) == model) << "reads back before closing";
        ASSERT_TRUE(image->flush());
    }
    expect_clean(path);
    EXPECT_TRUE(as_raw(path) == model);
}

TEST_P(Qcow2InteropTest, ReadsAndWritesThroughBackingFilesWithRelativeNames) {
    // base (raw) <- middle (qcow2) <- top, each named relative to the image that uses it.
    const uint64_t size = 4 * cluster() + (1 << 20);
    must("mkdir -p " + dir_.file("a/b"));
    const std::string base = dir_.file("base.raw");
    std::vector<uint8_t> model = pattern(size - cluster(), 1);  // shorter than the disk
    write_file_bytes(base, 0, model);
    model.resize(size, 0);
    const std::string middle =
        create("a/middle.qcow2", size, ",backing_file=../base.raw,backing_fmt=raw");
    must("qemu-io -f qcow2 -c 'write -P 0x5a " + std::to_string(cluster() + 100) + " 300' " +
         middle);
    std::fill_n(model.begin() + cluster() + 100, 300, 0x5a);
    const std::string top =
        create("a/b/top.qcow2", size, ",backing_file=../middle.qcow2,backing_fmt=qcow2");

    const auto base_before = file_bytes(base);
    {
        const auto image = Qcow2Image::open(top, false);
        EXPECT_TRUE(read_bytes(*image, 0, size) == model);
        // Partial clusters: the rest of each cluster is copied from below.
        const auto data = pattern(700, 9, cluster() - 200);
        ASSERT_TRUE(write_bytes(*image, cluster() - 200, data));
        std::copy(data.begin(), data.end(), model.begin() + cluster() - 200);
        EXPECT_TRUE(read_bytes(*image, 0, size) == model);
    }
    expect_clean(top);
    EXPECT_TRUE(as_raw(top) == model);
    EXPECT_TRUE(file_bytes(base) == base_before) << "backing files are only read";
}

TEST_P(Qcow2InteropTest, ReadsCompressedClustersAndCopiesThemOnWrite) {
    const uint64_t size = 6 * cluster();
    const std::string raw = dir_.file("source.raw");
    std::vector<uint8_t> model = pattern(size, 3);
    std::fill_n(model.begin() + cluster(), cluster(), 0);  // compresses to nothing
    write_file_bytes(raw, 0, model);
    const std::string path = dir_.file("compressed.qcow2");
    must("qemu-img convert -c -f raw -O qcow2 -o compat=" + std::string(GetParam().compat) +
         ",cluster_size=" + std::to_string(cluster()) + " " + raw + " " + path);
    {
        const auto image = Qcow2Image::open(path, false);
        EXPECT_TRUE(read_bytes(*image, 0, size) == model);
        const auto data = pattern(100, 4, 2 * cluster() + 50);
        ASSERT_TRUE(write_bytes(*image, 2 * cluster() + 50, data));
        std::copy(data.begin(), data.end(), model.begin() + 2 * cluster() + 50);
        EXPECT_TRUE(read_bytes(*image, 0, size) == model);
    }
    expect_clean(path);
    EXPECT_TRUE(as_raw(path) == model);
}

TEST_P(Qcow2InteropTest, DiscardFreesClustersAndWriteZeroesReadsZero) {
    const uint64_t size = 8 * cluster();
    const std::string path = create("disk.qcow2", size);
    std::vector<uint8_t> model = pattern(size, 5);
    {
        const auto image = Qcow2Image::open(path, false);
        ASSERT_TRUE(write_bytes(*image, 0, model));
        ASSERT_TRUE(image->discard(cluster() + 1, 3 * cluster()));  // whole: clusters 2 and 3
        std::fill_n(model.begin() + 2 * cluster(), 2 * cluster(), 0);
        ASSERT_TRUE(image->write_zeroes(5 * cluster() - 10, cluster() + 20, true));
        std::fill_n(model.begin() + 5 * cluster() - 10, cluster() + 20, 0);
        ASSERT_TRUE(image->write_zeroes(7 * cluster(), cluster(), false));
        std::fill_n(model.begin() + 7 * cluster(), cluster(), 0);
        EXPECT_TRUE(read_bytes(*image, 0, size) == model);
        ASSERT_TRUE(image->flush());
        // Discarded clusters are free again: rewriting them does not grow the file.
        const auto file_size = file_bytes(path).size();
        ASSERT_TRUE(write_bytes(*image, 2 * cluster(), pattern(2 * cluster(), 6)));
        ASSERT_TRUE(image->flush());
        EXPECT_EQ(file_bytes(path).size(), file_size);
        std::ranges::copy(pattern(2 * cluster(), 6), model.begin() + 2 * cluster());
    }
    expect_clean(path);
    EXPECT_TRUE(as_raw(path) == model);
}

TEST_P(Qcow2InteropTest, ZeroClustersHideTheBackingFile) {
    const uint64_t size = 4 * cluster();
    const std::string base = dir_.file("base.raw");
    write_file_bytes(base, 0, std::vector<uint8_t>(size, 0x77));
    const std::string path = create("top.qcow2", size, ",backing_file=base.raw,backing_fmt=raw");
    const auto image = Qcow2Image::open(path, false);
    ASSERT_TRUE(image->write_zeroes(cluster(), cluster(), false));
    EXPECT_EQ(read_bytes(*image, cluster(), cluster()), std::vector<uint8_t>(cluster(), 0));
    EXPECT_EQ(read_bytes(*image, 0, cluster()), std::vector<uint8_t>(cluster(), 0x77));
    ASSERT_TRUE(image->discard(2 * cluster(), cluster()));
    // Version 3 reads a discarded cluster as zeroes; version 2 lets the backing file show.
    const uint8_t want = GetParam().compat[0] == '0' ? 0x77 : 0;
    EXPECT_EQ(read_bytes(*image, 2 * cluster(), cluster()), std::vector<uint8_t>(cluster(), want));
}

INSTANTIATE_TEST_SUITE_P(Variants, Qcow2InteropTest,
                         ::testing::Values(Variant{"0.10", 512}, Variant{"0.10", 65536},
                                           Variant{"1.1", 512}, Variant{"1.1", 4096},
                                           Variant{"1.1", 65536}, Variant{"1.1", 2 << 20}),
                         variant_name);

}  // namespace
}  // namespace mvmm::devices::block::qcow2
