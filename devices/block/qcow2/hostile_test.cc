// Hostile images: real images from qemu-img with one header field or table entry changed.
// Each is refused at open with one line naming the file and what is wrong, or fails the
// requests that meet the bad entry with EIO; never a crash, a hang or a huge allocation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "devices/block/qcow2/format.h"
#include "devices/block/qcow2/qcow2_image.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using namespace testing;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class HostileImageTest : public ::testing::Test {
  protected:
    void SetUp() override {
        SKIP_WITHOUT_QEMU_IMG();
        must("qemu-img create -q -f qcow2 -o cluster_size=65536 " + path_ + " 4M");
        must("qemu-io -f qcow2 -c 'write -P 0x61 0 64k' -c 'write -P 0x62 64k 64k' " + path_);
    }
    uint64_t field64(uint64_t at) { return load_be64(file_bytes(path_, at, 8), 0); }
    void set64(uint64_t at, uint64_t value) {
        uint8_t bytes[8];
        store_be64(bytes, 0, value);
        write_file_bytes(path_, at, bytes);
    }
    void set32(uint64_t at, uint32_t value) {
        uint8_t bytes[4];
        store_be32(bytes, 0, value);
        write_file_bytes(path_, at, bytes);
    }
    uint64_t l1_offset() { return field64(40); }
    uint64_t refcount_table_offset() { return field64(48); }
    uint64_t l2_offset() { return field64(l1_offset()) & kOffsetMask; }
    // The L2 entry of guest cluster `index` lives here.
    uint64_t l2_entry_at(uint64_t index) { return l2_offset() + index * 8; }

    std::string open_error(bool read_only = false) {
        try {
            Qcow2Image::open(path_, read_only);
        } catch (const ImageError& e) {
            return e.what();
        }
        return "";
    }
    std::error_code read_error(const Qcow2Image& image, uint64_t offset) {
        std::vector<uint8_t> out(4096);
        const HostBuffer buffer(out);
        auto read = image.read(offset, buffer.buffers());
        return read ? std::error_code() : read.error();
    }

    ScratchDir dir_;
    std::string path_ = dir_.file("hostile.qcow2");
};

TEST_F(HostileImageTest, TheUntouchedImageReads) {
    const auto image = Qcow2Image::open(path_, false);
    EXPECT_EQ(read_bytes(*image, 65536, 4), std::vector<uint8_t>(4, 0x62));
}

TEST_F(HostileImageTest, RefusesBadL1Entries) {
    const uint64_t good = field64(l1_offset());
    set64(l1_offset(), good + 512);
    char unaligned[32];
    std::snprintf(unaligned, sizeof unaligned, "%#llx",
                  static_cast<unsigned long long>((good & kOffsetMask) + 512));
    EXPECT_EQ(open_error(),
              "disk image " + path_ + ": L1 entry 0 (" + unaligned + ") is not cluster aligned");
    set64(l1_offset(), (uint64_t{1} << 50) | kCopied);
    EXPECT_THAT(open_error(true), HasSubstr("L1 entry 0 (0x4000000000000) points past the end"));
}

TEST_F(HostileImageTest, FailsOnlyTheRequestsThatMeetABadL2Entry) {
    const uint64_t data = field64(l2_entry_at(1));
    set64(l2_entry_at(1), data + 4096);  // unaligned
    {
        const auto image = Qcow2Image::open(path_, false);
        EXPECT_EQ(read_error(*image, 65536), std::errc::io_error);
        EXPECT_EQ(write_bytes(*image, 65536, std::vector<uint8_t>(512, 1)).error(),
                  std::errc::io_error);
        EXPECT_FALSE(image->discard(65536, 65536));
        EXPECT_EQ(read_bytes(*image, 0, 4), std::vector<uint8_t>(4, 0x61)) << "the rest reads";
    }
    set64(l2_entry_at(1), (uint64_t{1} << 40) | kCopied);  // past the end of the file
    const auto image = Qcow2Image::open(path_, false);
    EXPECT_EQ(read_error(*image, 65536), std::errc::io_error);
    EXPECT_EQ(write_bytes(*image, 65536, std::vector<uint8_t>(512, 1)).error(),
              std::errc::io_error);
}

TEST_F(HostileImageTest, RefusesABadRefcountTable) {
    const uint64_t table = refcount_table_offset();
    set64(48, 1ull << 40);
    EXPECT_THAT(open_error(), HasSubstr("refcount table (65536 bytes at 0x10000000000) lies past"));
    set64(48, table + 512);
    EXPECT_THAT(open_error(), HasSubstr("refcount table offset 0x10200 is not cluster aligned"));
    set64(48, 0);
    EXPECT_THAT(open_error(), HasSubstr("refcount table overlaps the header"));
    set64(48, l1_offset());
    EXPECT_THAT(open_error(), HasSubstr("refcount table overlaps the L1 table"));
    set64(48, table);
    set64(table, field64(table) + 512);
    EXPECT_THAT(open_error(), HasSubstr("refcount table entry 0"));
}

TEST_F(HostileImageTest, RefusesAHeaderThatLiesAboutSizes) {
    set64(24, 1ull << 40);  // 1 TiB needs 2048 L1 entries; the table has one
    EXPECT_THAT(open_error(), HasSubstr("too small for the virtual size of 1099511627776"));
    set64(24, ~uint64_t{0});
    EXPECT_THAT(open_error(), HasSubstr("too small for the virtual size"));
    set64(24, 4 << 20);
    set32(36, 0xffffffff);
    EXPECT_THAT(open_error(), HasSubstr("larger than 32 MiB"));
    set32(36, 1);
    set32(96, 7);
    EXPECT_THAT(open_error(), HasSubstr("refcount_order 7"));
}

TEST_F(HostileImageTest, RefcountsThatDoNotCountTheMetadataRefuseWrites) {
    // The refcount block's first entries count the header, table, block and L1 clusters.
    const uint64_t block = field64(refcount_table_offset());
    set64(block, 0);  // header and refcount table: 0
    EXPECT_THAT(open_error(), HasSubstr("its refcounts say the header is free"));
    EXPECT_EQ(open_error(true), "") << "reads do not need them";
}

TEST_F(HostileImageTest, ARefcountUnderflowFailsTheRequestAndChangesNothing) {
    // Guest cluster 1's data has no reference in its refcount block: freeing it would take the
    // refcount below zero.
    const uint64_t data = field64(l2_entry_at(1)) & kOffsetMask;
    const uint64_t block = field64(refcount_table_offset());
    uint8_t zero[2] = {};
    write_file_bytes(path_, block + (data >> 16) * 2, zero);
    const auto image = Qcow2Image::open(path_, false);
    EXPECT_EQ(image->discard(65536, 65536).error(), std::errc::io_error);
    EXPECT_EQ(read_bytes(*image, 65536, 4), std::vector<uint8_t>(4, 0x62)) << "unchanged";
}

TEST_F(HostileImageTest, RefusesFeaturesItDoesNotHandle) {
    set64(72, 1 << 9);
    EXPECT_THAT(open_error(true), HasSubstr("unknown incompatible qcow2 features 0x200"));
    set64(72, 1);  // dirty: refcounts may be stale
    EXPECT_THAT(open_error(), HasSubstr("qemu-img check -r all"));
    EXPECT_EQ(open_error(true), "");
    set64(72, 0);
    set32(32, 1);
    EXPECT_THAT(open_error(true), HasSubstr("encrypted"));
    set32(32, 0);

    const std::string extended = dir_.file("extended.qcow2");
    must("qemu-img create -q -f qcow2 -o extended_l2=on " + extended + " 1M");
    EXPECT_THROW(Qcow2Image::open(extended, true), ImageError);
    const std::string external = dir_.file("external.qcow2");
    must("qemu-img create -q -f qcow2 -o data_file=" + dir_.file("data.raw") + " " + external +
         " 1M");
    try {
        Qcow2Image::open(external, true);
        ADD_FAILURE() << "opened an image with an external data file";
    } catch (const ImageError& e) {
        EXPECT_THAT(e.what(), HasSubstr("external data files are not supported"));
    }
}

// Compressed clusters whose data lies: 4 KiB clusters, one compressed cluster at guest 0.
class HostileCompressedTest : public HostileImageTest {
  protected:
    void SetUp() override {
        SKIP_WITHOUT_QEMU_IMG();
        write_file_bytes(dir_.file("src.raw"), 0, pattern(8192, 1));
        must("qemu-img convert -c -f raw -O qcow2 -o cluster_size=4096 " + dir_.file("src.raw") +
             " " + path_);
        entry_ = decode_l2_entry(field64(l2_offset()), Geometry{.cluster_bits = 12}).value();
        ASSERT_EQ(entry_.kind, ClusterKind::Compressed);
    }
    // Replaces the compressed data with `bytes` deflated (raw, 4 KiB window, as QEMU does).
    void store_deflated(const std::vector<uint8_t>& bytes) {
        std::vector<uint8_t> out(entry_.compressed_bytes);
        z_stream s{};
        ASSERT_EQ(deflateInit2(&s, 9, Z_DEFLATED, -12, 9, Z_DEFAULT_STRATEGY), Z_OK);
        s.next_in = const_cast<Bytef*>(bytes.data());
        s.avail_in = static_cast<uInt>(bytes.size());
        s.next_out = out.data();
        s.avail_out = static_cast<uInt>(out.size());
        ASSERT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END) << "fits in the cluster's sectors";
        deflateEnd(&s);
        write_file_bytes(path_, entry_.host_offset, out);
    }
    L2Entry entry_;
};

TEST_F(HostileCompressedTest, ReadsTheUntouchedCluster) {
    EXPECT_EQ(read_bytes(*Qcow2Image::open(path_, true), 0, 4096), pattern(4096, 1));
}

TEST_F(HostileCompressedTest, AClusterThatInflatesPastItsSizeIsAnIoError) {
    store_deflated(std::vector<uint8_t>(3 * 4096, 0x41));
    EXPECT_EQ(read_error(*Qcow2Image::open(path_, true), 0), std::errc::io_error);
}

TEST_F(HostileCompressedTest, AClusterThatInflatesShortOrIsNotDeflateIsAnIoError) {
    store_deflated(std::vector<uint8_t>(4000, 0x41));
    EXPECT_EQ(read_error(*Qcow2Image::open(path_, true), 0), std::errc::io_error);
    write_file_bytes(path_, entry_.host_offset,
                     std::vector<uint8_t>(entry_.compressed_bytes, 0xff));
    const auto image = Qcow2Image::open(path_, false);
    EXPECT_EQ(read_error(*image, 0), std::errc::io_error);
    EXPECT_EQ(write_bytes(*image, 100, std::vector<uint8_t>(10, 1)).error(), std::errc::io_error)
        << "the copy-on-write read fails too";
}

TEST_F(HostileCompressedTest, ADescriptorPastTheEndOfTheFileIsAnIoError) {
    set64(l2_offset(), kCompressed | (uint64_t{1} << 40));
    EXPECT_EQ(read_error(*Qcow2Image::open(path_, true), 0), std::errc::io_error);
}

class HostileChainTest : public ::testing::Test {
  protected:
    void SetUp() override { SKIP_WITHOUT_QEMU_IMG(); }
    void create(const std::string& name, const std::string& backing, const std::string& format) {
        must("qemu-img create -q -f qcow2 -u" +
             (backing.empty() ? "" : " -b " + backing + " -F " + format) + " " + dir_.file(name) +
             " 1M");
    }
    std::string open_error(const std::string& name) {
        try {
            Qcow2Image::open(dir_.file(name), false);
        } catch (const ImageError& e) {
            return e.what();
        }
        return "";
    }
    ScratchDir dir_;
};

TEST_F(HostileChainTest, RefusesALoop) {
    create("a.qcow2", "b.qcow2", "qcow2");
    create("b.qcow2", "c.qcow2", "qcow2");
    create("c.qcow2", "a.qcow2", "qcow2");
    EXPECT_EQ(open_error("a.qcow2"), "disk image " + dir_.file("a.qcow2") + ": backing file " +
                                         dir_.file("a.qcow2") +
                                         ": the backing chain loops back to this file");
}

TEST_F(HostileChainTest, RefusesAChainTooDeep) {
    create("0.qcow2", "", "");
    for (int i = 1; i <= 33; ++i)
        create(std::to_string(i) + ".qcow2", std::to_string(i - 1) + ".qcow2", "qcow2");
    EXPECT_EQ(open_error("32.qcow2"), "") << "32 backing files are allowed";
    EXPECT_THAT(open_error("33.qcow2"), HasSubstr("deeper than 32 images"));
}

TEST_F(HostileChainTest, RefusesABackingFormatItDoesNotRead) {
    create("vmdk.qcow2", "base.vmdk", "vmdk");
    EXPECT_THAT(open_error("vmdk.qcow2"), HasSubstr("its format 'vmdk' is not supported"));
}

TEST_F(HostileChainTest, ProbesTheBackingFormatWhenTheHeaderDoesNotSay) {
    write_file_bytes(dir_.file("base.raw"), 0, std::vector<uint8_t>(1 << 20, 0x42));
    create("top.qcow2", "base.raw", "raw");
    // Hide the backing format extension behind an unknown type.
    const std::string top = dir_.file("top.qcow2");
    auto header = file_bytes(top, 0, 4096);
    for (size_t at = 104; at + 4 <= header.size(); at += 8) {
        if (load_be32(header, at) == 0xe2792aca) {
            uint8_t unknown[4];
            store_be32(unknown, 0, 0x12345678);
            write_file_bytes(top, at, unknown);
        }
    }
    const auto image = Qcow2Image::open(top, true);
    EXPECT_EQ(read_bytes(*image, 0, 4), std::vector<uint8_t>(4, 0x42)) << "probed as raw";
}

}  // namespace
}  // namespace mvmm::devices::block::qcow2
