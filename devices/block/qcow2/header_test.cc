#include "devices/block/qcow2/header.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mvmm::devices::block::qcow2 {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kCluster = 65536;

// A header as qemu-img writes it for a 1 GiB disk: refcount table in cluster 1, L1 table in
// cluster 3, a file of four clusters.  Each test breaks one field.
struct Fields {
    uint32_t version = 3;
    uint32_t cluster_bits = 16;
    uint64_t size = 1 << 30;
    uint32_t l1_size = 2;
    uint64_t l1_offset = 3 * kCluster;
    uint64_t refcount_table_offset = kCluster;
    uint32_t refcount_table_clusters = 1;
    uint64_t incompatible = 0;
    uint32_t refcount_order = 4;
    uint32_t header_length = 112;
    uint8_t compression_type = 0;
    std::string backing = {};
    std::vector<uint8_t> extensions = {};  // after the header
    uint64_t file_size = 4 * kCluster;
};

std::vector<uint8_t> bytes_of(const Fields& f) {
    std::vector<uint8_t> b(kCluster);
    store_be32(b, 0, kMagic);
    store_be32(b, 4, f.version);
    store_be32(b, 20, f.cluster_bits);
    store_be64(b, 24, f.size);
    store_be32(b, 36, f.l1_size);
    store_be64(b, 40, f.l1_offset);
    store_be64(b, 48, f.refcount_table_offset);
    store_be32(b, 56, f.refcount_table_clusters);
    store_be64(b, 72, f.incompatible);
    store_be32(b, 96, f.refcount_order);
    store_be32(b, 100, f.header_length);
    b[104] = f.compression_type;
    const size_t header_end = f.version == 2 ? kV2HeaderLength : f.header_length;
    std::copy(f.extensions.begin(), f.extensions.end(), b.begin() + header_end);
    if (!f.backing.empty()) {
        store_be64(b, 8, 0x200);
        store_be32(b, 16, static_cast<uint32_t>(f.backing.size()));
        std::copy(f.backing.begin(), f.backing.end(), b.begin() + 0x200);
    }
    return b;
}

Result<Header, std::string> parse(const Fields& f) {
    return parse_header(bytes_of(f), f.file_size);
}

std::string error_of(const Fields& f) {
    auto h = parse(f);
    return h ? "" : h.error();
}

std::vector<uint8_t> extension(uint32_t type, const std::string& data) {
    std::vector<uint8_t> e(8 + (data.size() + 7) / 8 * 8);
    store_be32(e, 0, type);
    store_be32(e, 4, static_cast<uint32_t>(data.size()));
    std::copy(data.begin(), data.end(), e.begin() + 8);
    return e;
}

TEST(HeaderTest, ParsesAVersion3Header) {
    Fields f;
    f.backing = "base.qcow2";
    f.extensions = extension(0xe2792aca, "qcow2");
    const auto h = parse(f);
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->geometry.version, 3u);
    EXPECT_EQ(h->geometry.cluster_size(), kCluster);
    EXPECT_EQ(h->size, 1u << 30);
    EXPECT_EQ(h->l1_table_offset, 3 * kCluster);
    EXPECT_EQ(h->backing_file, "base.qcow2");
    EXPECT_EQ(h->backing_format, "qcow2");
    EXPECT_FALSE(unsupported_feature(*h, true));
}

TEST(HeaderTest, ParsesAVersion2HeaderWith16BitRefcounts) {
    Fields f;
    f.version = 2;
    f.refcount_order = 0;  // not a field in version 2: ignored
    const auto h = parse(f);
    ASSERT_TRUE(h) << h.error();
    EXPECT_EQ(h->geometry.refcount_order, 4u);
    EXPECT_EQ(h->header_length, kV2HeaderLength);
}

TEST(HeaderTest, RefusesWhatIsNotAQcow2Header) {
    EXPECT_THAT(std::string(parse_header(std::vector<uint8_t>(40), 40).error()),
                HasSubstr("too short"));
    std::vector<uint8_t> raw(512, 0xab);
    EXPECT_THAT(parse_header(raw, 512).error(), HasSubstr("not a qcow2 image"));
    EXPECT_THAT(error_of({.version = 4}), HasSubstr("version 4 is not supported"));
    EXPECT_THAT(error_of({.cluster_bits = 8}), HasSubstr("cluster_bits 8 is out of range"));
    EXPECT_THAT(error_of({.cluster_bits = 22}), HasSubstr("cluster_bits 22 is out of range"));
    EXPECT_THAT(error_of({.refcount_order = 7}), HasSubstr("refcount_order 7"));
    EXPECT_THAT(error_of({.header_length = 96}), HasSubstr("header_length"));
    EXPECT_THAT(error_of({.header_length = 70000}), HasSubstr("header_length"));
}

TEST(HeaderTest, RefusesAnL1TableThatLies) {
    EXPECT_THAT(error_of({.l1_size = 1}), HasSubstr("too small for the virtual size"));
    EXPECT_THAT(error_of({.size = ~uint64_t{0}}), HasSubstr("too small for the virtual size"));
    EXPECT_THAT(error_of({.l1_size = 5u << 20}), HasSubstr("larger than 32 MiB"));
    EXPECT_THAT(error_of({.l1_offset = 3 * kCluster + 512}), HasSubstr("not cluster aligned"));
    EXPECT_THAT(error_of({.l1_offset = 4 * kCluster}), HasSubstr("past the end of the file"));
    EXPECT_THAT(error_of({.l1_offset = ~uint64_t{0} - kCluster + 1}),
                HasSubstr("past the end of the file"));
    EXPECT_THAT(error_of({.l1_offset = 0}), HasSubstr("L1 table overlaps the header"));
    EXPECT_TRUE(parse({.size = 0, .l1_size = 0, .l1_offset = 0})) << "an empty disk has no L1";
}

TEST(HeaderTest, RefusesARefcountTableThatLies) {
    EXPECT_THAT(error_of({.refcount_table_clusters = 0}), HasSubstr("no refcount table"));
    EXPECT_THAT(error_of({.refcount_table_clusters = 129}), HasSubstr("larger than 8 MiB"));
    EXPECT_THAT(error_of({.refcount_table_offset = kCluster + 8}),
                HasSubstr("not cluster aligned"));
    EXPECT_THAT(error_of({.refcount_table_clusters = 4}), HasSubstr("past the end of the file"));
    EXPECT_THAT(error_of({.refcount_table_offset = 0}),
                HasSubstr("refcount table overlaps the header"));
    EXPECT_THAT(error_of({.refcount_table_offset = 3 * kCluster}),
                HasSubstr("refcount table overlaps the L1 table"));
}

TEST(HeaderTest, RefusesBadBackingNamesAndExtensions) {
    EXPECT_THAT(error_of({.backing = std::string(1024, 'a')}), HasSubstr("longer than 1023"));
    EXPECT_THAT(error_of({.backing = std::string("a\0b", 3)}), HasSubstr("NUL"));
    Fields outside;
    outside.cluster_bits = 9;
    outside.size = 1 << 20;
    outside.l1_size = 32;
    outside.l1_offset = 3 * 512;
    outside.refcount_table_offset = 512;
    outside.header_length = 104;
    outside.backing = "base";  // at 0x200: past the first cluster of 512 bytes
    EXPECT_THAT(error_of(outside), HasSubstr("outside the first cluster"));

    Fields too_long;
    too_long.extensions = extension(0x6803f857, "");
    store_be32(too_long.extensions, 4, 70000);
    EXPECT_THAT(error_of(too_long), HasSubstr("header extension runs past"));
    EXPECT_THAT(error_of({.extensions = extension(0xe2792aca, "a-very-long-format")}),
                HasSubstr("backing format name is too long"));
    EXPECT_TRUE(parse({.extensions = extension(0x12345678, "unknown, ignored")}));
}

TEST(HeaderTest, SaysWhichFeaturesAreNotSupported) {
    auto feature = [](uint64_t incompatible, bool writable) {
        auto h = parse({.incompatible = incompatible});
        return unsupported_feature(h.value(), writable).value_or("");
    };
    EXPECT_THAT(feature(1 << 9, false), HasSubstr("unknown incompatible qcow2 features 0x200"));
    EXPECT_THAT(feature(kIncompatibleDataFile, false), HasSubstr("external data files"));
    EXPECT_THAT(feature(kIncompatibleExtendedL2, false), HasSubstr("extended L2"));
    EXPECT_THAT(feature(kIncompatibleCompression, false), HasSubstr("zlib"));
    EXPECT_THAT(feature(kIncompatibleDirty, true), HasSubstr("qemu-img check -r all"));
    EXPECT_EQ(feature(kIncompatibleDirty, false), "") << "reads do not need refcounts";
    EXPECT_THAT(feature(kIncompatibleCorrupt, true), HasSubstr("marked corrupt"));
    EXPECT_EQ(feature(kIncompatibleCorrupt, false), "");
    auto encrypted = parse({});
    encrypted->crypt_method = 2;
    EXPECT_THAT(unsupported_feature(*encrypted, false).value_or(""), HasSubstr("encrypted"));
}

TEST(TableTest, ChecksEveryEntry) {
    const Geometry g{.cluster_bits = 16};
    std::vector<uint8_t> bytes(4 * 8);
    store_be64(bytes, 0, 2 * kCluster | kCopied);
    store_be64(bytes, 8, 0);
    auto l1 = parse_l1_table(bytes, g, 4 * kCluster);
    ASSERT_TRUE(l1) << l1.error();
    EXPECT_EQ((*l1)[0], 2 * kCluster | kCopied);

    store_be64(bytes, 16, 2 * kCluster + 512);
    EXPECT_THAT(parse_l1_table(bytes, g, 4 * kCluster).error(), HasSubstr("L1 entry 2"));
    store_be64(bytes, 16, 4 * kCluster);
    EXPECT_THAT(parse_l1_table(bytes, g, 4 * kCluster).error(), HasSubstr("past the end"));
    std::vector<uint8_t> refcount_table(4 * 8);
    store_be64(refcount_table, 0, 2 * kCluster);
    ASSERT_TRUE(parse_refcount_table(refcount_table, g, 4 * kCluster));
    store_be64(refcount_table, 24, 3 * kCluster + 512);
    EXPECT_THAT(parse_refcount_table(refcount_table, g, 4 * kCluster).error(),
                HasSubstr("refcount table entry 3"));
    store_be64(refcount_table, 24, kCopied | kCluster);  // no flags here: a huge offset
    EXPECT_THAT(parse_refcount_table(refcount_table, g, 4 * kCluster).error(),
                HasSubstr("past the end"));
}

TEST(HeaderTest, PeeksTheClusterSize) {
    EXPECT_EQ(peek_cluster_size(bytes_of({.cluster_bits = 21})), 2u << 20);
    EXPECT_FALSE(peek_cluster_size(bytes_of({.cluster_bits = 30})));
    EXPECT_FALSE(peek_cluster_size(std::vector<uint8_t>(16)));
}

}  // namespace
}  // namespace mvmm::devices::block::qcow2
