// cache=none for qcow2 images: the image and its backing files are opened with O_DIRECT, and
// everything the engine moves (guest data, tables, header fields and table entries, compressed
// clusters, copy-on-write) keeps to the file's alignment.  The files live on a disk filesystem
// ($MVMM_DIRECT_TMPDIR, else /var/tmp): tmpfs takes misaligned O_DIRECT transfers, a disk
// filesystem refuses them with EINVAL, so a transfer the engine failed to align shows here.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/mapping.h"
#include "devices/block/direct_io.h"
#include "devices/block/disk_image.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using namespace testing;

std::string direct_parent() {
    const char* dir = std::getenv("MVMM_DIRECT_TMPDIR");
    if (dir && *dir) return dir;
    return ::access("/var/tmp", W_OK) == 0 ? "/var/tmp" : "/tmp";
}

// The open(2) flags of this process's descriptors of `path` (/proc/self/fdinfo).
std::vector<int> open_flags(const std::string& path) {
    std::vector<int> flags;
    const auto target = std::filesystem::canonical(path);
    for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code error;
        if (std::filesystem::read_symlink(fd.path(), error) != target) continue;
        std::ifstream info("/proc/self/fdinfo/" + fd.path().filename().string());
        for (std::string line; std::getline(info, line);)
            if (line.starts_with("flags:")) flags.push_back(std::stoi(line.substr(6), nullptr, 8));
    }
    return flags;
}

// Whether this process holds `path` open, every descriptor of it with O_DIRECT.
bool opened_direct(const std::string& path) {
    const auto flags = open_flags(path);
    return !flags.empty() && std::ranges::all_of(flags, [](int f) { return (f & O_DIRECT) != 0; });
}

// Page-aligned buffers, as the queues give an image whose buffer_alignment() asks for it.
class Aligned {
  public:
    explicit Aligned(size_t size)
        : mapping_(Mapping::anonymous((size + 4095) / 4096 * 4096)), size_(size) {}
    std::span<uint8_t> bytes() const { return mapping_.bytes().first(size_); }

  private:
    Mapping mapping_;
    size_t size_;
};

std::vector<uint8_t> read_disk(const DiskImage& image, uint64_t offset, size_t size) {
    const Aligned buffer(size);
    const HostBuffer host(buffer.bytes());
    if (auto read = image.read(offset, host.buffers()); !read)
        throw std::runtime_error("read at " + std::to_string(offset) + ": " +
                                 read.error().message());
    return {buffer.bytes().begin(), buffer.bytes().end()};
}

// Writes `data` to the image and to `model`, the disk as it should read.
void write_disk(const DiskImage& image, std::vector<uint8_t>& model, uint64_t offset,
                const std::vector<uint8_t>& data) {
    const Aligned buffer(data.size());
    std::ranges::copy(data, buffer.bytes().begin());
    const HostBuffer host(buffer.bytes());
    const IoResult written = image.write(offset, host.buffers());
    ASSERT_TRUE(written) << "write at " << offset << ": " << written.error().message();
    std::ranges::copy(data, model.begin() + static_cast<ptrdiff_t>(offset));
}

std::unique_ptr<DiskImage> open_direct(const std::string& path, bool read_only) {
    return open_disk_image(path, read_only, {.cache = CacheMode::None});
}

struct Variant {
    const char* compat;  // "0.10" is version 2
    uint64_t cluster_size;
};

class Qcow2DirectTest : public ::testing::TestWithParam<Variant> {
  protected:
    void SetUp() override {
        SKIP_WITHOUT_QEMU_IMG();
        const std::string probe = dir_.file("probe");
        write_file_bytes(probe, 0, pattern(4096, 0));
        const Fd fd(::open(probe.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT));
        if (!fd.valid())
            GTEST_SKIP() << dir_.path() << ": its filesystem refuses O_DIRECT ("
                         << std::strerror(errno) << ")";
    }
    std::string options(const std::string& extra = "") const {
        return "compat=" + std::string(GetParam().compat) +
               ",cluster_size=" + std::to_string(cluster()) + extra;
    }
    uint64_t cluster() const { return GetParam().cluster_size; }

    ScratchDir dir_{direct_parent()};
};

TEST_P(Qcow2DirectTest, WritesAllocateAndSurviveAReopen) {
    // 512-byte clusters: 9 MiB of writes make new refcount blocks and grow the refcount table
    // (8-byte entries and a 12-byte header update, written inside their aligned blocks).
    const uint64_t size = 16 << 20, cs = cluster();
    const std::string path = create_image(dir_, "disk.qcow2", options(), size);
    must("qemu-io -f qcow2 -c 'write -P 0x5a 0 1M' " + path);
    std::vector<uint8_t> model(size, 0);
    std::fill_n(model.begin(), 1 << 20, 0x5a);
    {
        const auto image = open_direct(path, false);
        EXPECT_TRUE(opened_direct(path));
        EXPECT_GE(image->buffer_alignment(), 512u);
        for (uint64_t at = 2 << 20; at < (11 << 20); at += 1 << 20)
            write_disk(*image, model, at, pattern(1 << 20, 1, at));
        write_disk(*image, model, (11 << 20) + cs + 1536 % cs, pattern(4096, 2));  // copy-on-write
        write_disk(*image, model, 4096, pattern(8192, 3));                         // in place
        ASSERT_TRUE(image->discard(4 * cs, 2 * cs));  // no backing file: zeroes, v2 and v3
        std::fill_n(model.begin() + 4 * cs, 2 * cs, 0);
        ASSERT_TRUE(image->write_zeroes((3 << 20) + 512, 3 * cs + 1024, false));
        std::fill_n(model.begin() + (3 << 20) + 512, 3 * cs + 1024, 0);
        EXPECT_TRUE(read_disk(*image, 0, size) == model);
        ASSERT_TRUE(image->flush());
    }
    expect_check_clean(path);
    EXPECT_TRUE(converted_to_raw(path) == model);
    {
        const auto image = open_direct(path, false);
        EXPECT_TRUE(read_disk(*image, 0, size) == model);
        write_disk(*image, model, size - 8192, pattern(8192, 4));
    }
    expect_check_clean(path);
    EXPECT_TRUE(converted_to_raw(path) == model);
}

TEST_P(Qcow2DirectTest, CompressedClustersReadRightAndCopyOnWrite) {
    const uint64_t size = 4 << 20;
    const std::string raw = dir_.file("data.raw"), path = dir_.file("packed.qcow2");
    std::vector<uint8_t> model = pattern(size, 5);
    std::fill_n(model.begin() + (1 << 20), 1 << 20, 0x11);  // compresses well
    write_file_bytes(raw, 0, model);
    must("qemu-img convert -q -c -f raw -O qcow2 -o " + options() + " " + raw + " " + path);
    {
        const auto image = open_direct(path, true);
        EXPECT_TRUE(opened_direct(path));
        EXPECT_TRUE(read_disk(*image, 0, size) == model);
        const auto inside = read_disk(*image, (1 << 20) + 1536, 2048);
        EXPECT_TRUE(std::ranges::equal(inside, std::span(model).subspan((1 << 20) + 1536, 2048)));
    }
    {
        const auto image = open_direct(path, false);
        write_disk(*image, model, (1 << 20) + 3 * cluster() + 512 % cluster(), pattern(1024, 6));
        EXPECT_TRUE(read_disk(*image, 0, size) == model);
    }
    expect_check_clean(path);
    EXPECT_TRUE(converted_to_raw(path) == model);
}

TEST_P(Qcow2DirectTest, BuffersTheFileCannotTakeStillMoveRight) {
    // The queues bounce such buffers before they reach the image; the image copes anyway.
    const std::string path = create_image(dir_, "odd.qcow2", options(), 1 << 20);
    const auto image = open_direct(path, false);
    std::vector<uint8_t> bytes(8192 + 1);
    const std::vector<uint8_t> data = pattern(8192, 7);
    std::ranges::copy(data, bytes.begin() + 1);
    const HostBuffer from(std::span<uint8_t>(bytes).subspan(1));
    ASSERT_TRUE(image->write(cluster() + 512, from.buffers()));
    std::ranges::fill(bytes, 0);
    ASSERT_TRUE(image->read(cluster() + 512, from.buffers()));
    EXPECT_TRUE(std::ranges::equal(std::span(bytes).subspan(1), data));
}

TEST_P(Qcow2DirectTest, ABackingChainIsOpenedWithODirectToo) {
    // A raw base whose size is no multiple of a sector: its last block is read around.
    const uint64_t size = 2 << 20, base_size = (1 << 20) + 1000;
    const std::string base = dir_.file("base.raw");
    write_file_bytes(base, 0, pattern(base_size, 8));
    const std::string mid =
        create_image(dir_, "mid.qcow2", options(",backing_file=base.raw,backing_fmt=raw"), size);
    must("qemu-io -f qcow2 -c 'write -P 0x66 64k 64k' " + mid);
    const std::string top =
        create_image(dir_, "top.qcow2", options(",backing_file=mid.qcow2,backing_fmt=qcow2"), size);
    std::vector<uint8_t> model = converted_to_raw(top);
    {
        const auto image = open_direct(top, false);
        for (const std::string& file : {top, mid, base}) EXPECT_TRUE(opened_direct(file)) << file;
        EXPECT_TRUE(read_disk(*image, 0, size) == model);
        write_disk(*image, model, (1 << 20) - 1024, pattern(4096, 9));  // across the base's end
        write_disk(*image, model, 65536 + 512, pattern(1024, 10));
        EXPECT_TRUE(read_disk(*image, 0, size) == model);
    }
    expect_check_clean(top);
    EXPECT_TRUE(converted_to_raw(top) == model);
    const auto buffered = open_disk_image(top, true);
    EXPECT_FALSE(open_flags(top).empty());
    EXPECT_FALSE(opened_direct(top)) << "cache=writeback is not O_DIRECT";
}

TEST(DirectIoTest, AFilesystemWithoutODirectIsNamedAtOpen) {
    EXPECT_THAT([] { check_direct_open(CacheMode::None, EINVAL, "disk image /x/a.qcow2"); },
                ::testing::ThrowsMessage<ImageError>(::testing::AllOf(
                    ::testing::StartsWith("disk image /x/a.qcow2: cache=none: its filesystem"),
                    ::testing::HasSubstr("tmpfs before Linux 6.6"),
                    ::testing::HasSubstr("use cache=writeback"))));
    // Other errors are the open's own; without cache=none EINVAL is not O_DIRECT's.
    EXPECT_NO_THROW(check_direct_open(CacheMode::None, ENOENT, "disk image /x/a.qcow2"));
    EXPECT_NO_THROW(check_direct_open(CacheMode::Writeback, EINVAL, "disk image /x/a.qcow2"));
}

INSTANTIATE_TEST_SUITE_P(Variants, Qcow2DirectTest,
                         ::testing::Values(Variant{"0.10", 4096}, Variant{"1.1", 512},
                                           Variant{"1.1", 65536}),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                             return std::string(info.param.compat[0] == '0' ? "v2_" : "v3_") +
                                    std::to_string(info.param.cluster_size);
                         });

}  // namespace
}  // namespace mvmm::devices::block::qcow2
