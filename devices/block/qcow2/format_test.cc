#include "devices/block/qcow2/format.h"

#include <gtest/gtest.h>

#include <vector>

namespace mvmm::devices::block::qcow2 {
namespace {

const Geometry kV3{.version = 3, .cluster_bits = 16, .refcount_order = 4};
const Geometry kV2{.version = 2, .cluster_bits = 16, .refcount_order = 4};

TEST(GeometryTest, SizesFollowFromTheClusterBits) {
    EXPECT_EQ(kV3.cluster_size(), 65536u);
    EXPECT_EQ(kV3.l2_entries(), 8192u);
    EXPECT_EQ(kV3.l2_span(), 512ull << 20);
    EXPECT_EQ(kV3.l1_index((512ull << 20) * 3 + 5), 3u);
    EXPECT_EQ(kV3.l2_index((512ull << 20) + 65536 * 7 + 1), 7u);
    EXPECT_EQ(kV3.refcounts_per_block(), 32768u);
    EXPECT_EQ(kV3.refcount_max(), 0xffffu);
    EXPECT_EQ((Geometry{.refcount_order = 6}).refcount_max(), ~uint64_t{0});
    EXPECT_EQ((Geometry{.refcount_order = 0}).refcount_max(), 1u);
}

TEST(GeometryTest, L1EntriesForAnySizeDoNotOverflow) {
    EXPECT_EQ(kV3.l1_entries_for(0), 0u);
    EXPECT_EQ(kV3.l1_entries_for(1), 1u);
    EXPECT_EQ(kV3.l1_entries_for(512ull << 20), 1u);
    EXPECT_EQ(kV3.l1_entries_for((512ull << 20) + 1), 2u);
    EXPECT_EQ(kV3.l1_entries_for(~uint64_t{0}), (~uint64_t{0} >> 29) + 1);
}

TEST(L2EntryTest, DecodesEachKind) {
    EXPECT_EQ(decode_l2_entry(0, kV3)->kind, ClusterKind::Unallocated);

    const auto data = decode_l2_entry(0x50000 | kCopied, kV3);
    ASSERT_TRUE(data);
    EXPECT_EQ(data->kind, ClusterKind::Data);
    EXPECT_EQ(data->host_offset, 0x50000u);
    EXPECT_TRUE(data->copied);
    EXPECT_EQ(data->referenced_bytes(kV3), 65536u);

    const auto shared = decode_l2_entry(0x50000, kV3);
    EXPECT_FALSE(shared->copied);

    const auto zero = decode_l2_entry(kZeroFlag, kV3);
    EXPECT_EQ(zero->kind, ClusterKind::Zero);
    EXPECT_EQ(zero->referenced_bytes(kV3), 0u);
    const auto preallocated = decode_l2_entry(0x70000 | kZeroFlag | kCopied, kV3);
    EXPECT_EQ(preallocated->kind, ClusterKind::Zero);
    EXPECT_EQ(preallocated->host_offset, 0x70000u);
    EXPECT_EQ(preallocated->referenced_bytes(kV3), 65536u);
}

TEST(L2EntryTest, DecodesACompressedDescriptor) {
    // 64 KiB clusters: offset in bits 0-53, additional sectors in bits 54-61.
    const uint64_t raw = kCompressed | (uint64_t{3} << 54) | 0x12345;
    const auto entry = decode_l2_entry(raw, kV3);
    ASSERT_TRUE(entry);
    EXPECT_EQ(entry->kind, ClusterKind::Compressed);
    EXPECT_EQ(entry->host_offset, 0x12345u);
    EXPECT_EQ(entry->compressed_bytes, 4 * 512 - 0x145u);  // to the end of its fourth sector
    EXPECT_EQ(entry->referenced_bytes(kV3), entry->compressed_bytes);

    // 512-byte clusters: one bit of size, at bit 61.
    const Geometry small{.version = 3, .cluster_bits = 9};
    const auto tiny = decode_l2_entry(kCompressed | (uint64_t{1} << 61) | 0x400, small);
    EXPECT_EQ(tiny->host_offset, 0x400u);
    EXPECT_EQ(tiny->compressed_bytes, 1024u);
}

TEST(L2EntryTest, RefusesWhatNoCorrectImageHolds) {
    EXPECT_FALSE(decode_l2_entry(0x50200 | kCopied, kV3)) << "not cluster aligned";
    EXPECT_FALSE(decode_l2_entry(0x50200 | kZeroFlag, kV3)) << "preallocated, not aligned";
    EXPECT_FALSE(decode_l2_entry(kZeroFlag, kV2)) << "the zero flag is version 3";
    EXPECT_TRUE(decode_l2_entry(0x50000 | kCopied, kV2));
}

TEST(RefcountTest, EveryWidthRoundTripsWithoutDisturbingItsNeighbours) {
    for (uint32_t order = 0; order <= 6; ++order) {
        std::vector<uint8_t> block(64, 0xff);
        const uint64_t bits = uint64_t{1} << order;
        const uint64_t max = order == 6 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
        const uint64_t entries = block.size() * 8 / bits;
        for (uint64_t i = 0; i < entries; ++i) ASSERT_EQ(get_refcount(block, i, order), max);
        set_refcount(block, 3, order, 1);
        set_refcount(block, entries - 1, order, max - 1);
        for (uint64_t i = 0; i < entries; ++i) {
            const uint64_t want = i == 3 ? 1 : i == entries - 1 ? max - 1 : max;
            EXPECT_EQ(get_refcount(block, i, order), want) << "order " << order << " index " << i;
        }
    }
}

TEST(RefcountTest, WideRefcountsAreBigEndianAndSubByteOnesStartAtTheLowBit) {
    std::vector<uint8_t> block(16, 0);
    set_refcount(block, 1, 4, 0x0102);
    EXPECT_EQ(block[2], 0x01);
    EXPECT_EQ(block[3], 0x02);
    std::vector<uint8_t> bits(2, 0);
    set_refcount(bits, 0, 0, 1);
    set_refcount(bits, 9, 0, 1);
    EXPECT_EQ(bits[0], 0x01);
    EXPECT_EQ(bits[1], 0x02);
}

}  // namespace
}  // namespace mvmm::devices::block::qcow2
