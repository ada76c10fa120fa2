// parse_unmap_list() on good and hostile parameter lists.
#include "devices/virtio/scsi/unmap_list.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <vector>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr LunInfo kLun{.blocks = 2048, .read_only = false};

std::vector<uint8_t> unmap_list(std::initializer_list<BlockRange> ranges, int extra_header = 0) {
    std::vector<uint8_t> list(8 + 16 * ranges.size(), 0);
    const size_t descriptors = 16 * ranges.size();
    list[0] = uint8_t((descriptors + 6 + extra_header) >> 8);
    list[1] = uint8_t(descriptors + 6 + extra_header);
    list[2] = uint8_t(descriptors >> 8);
    list[3] = uint8_t(descriptors);
    size_t at = 8;
    for (const auto& r : ranges) {
        for (int i = 0; i < 8; ++i) list[at + i] = uint8_t(r.lba >> (56 - 8 * i));
        for (int i = 0; i < 4; ++i) list[at + 8 + i] = uint8_t(r.blocks >> (24 - 8 * i));
        at += 16;
    }
    return list;
}

// The list as the data-out buffer a command carries.
Result<UnmapRanges, Sense> parse_list(std::vector<uint8_t> list, const LunInfo& lun) {
    const GuestBuffers::Part part{std::span(list)};
    return parse_unmap_list(GuestBuffers(std::span(&part, 1)), lun);
}

TEST(ParseUnmapList, ReadsTheDescriptors) {
    auto ranges = parse_list(unmap_list({{0, 8}, {100, 0}, {2040, 8}}), kLun);
    ASSERT_TRUE(ranges);
    EXPECT_EQ(*ranges, (UnmapRanges{{0, 8}, {2040, 8}})) << "empty ranges dropped";
    auto none = parse_list(unmap_list({}), kLun);
    ASSERT_TRUE(none);
    EXPECT_TRUE(none->empty());
}

TEST(ParseUnmapList, TakesAListLongerThanItsDescriptors) {
    auto list = unmap_list({{0, 8}, {16, 8}}, 4096);
    list.resize(list.size() + 4096, 0xee);  // a parameter list length past the descriptors
    auto ranges = parse_list(list, kLun);
    ASSERT_TRUE(ranges);
    EXPECT_EQ(*ranges, (UnmapRanges{{0, 8}, {16, 8}}));
}

TEST(ParseUnmapList, RefusesHostileLists) {
    EXPECT_EQ(parse_list(std::vector<uint8_t>(7, 0), kLun).error(), sense::kParameterListLength);
    auto too_long = unmap_list({{0, 8}});
    too_long[3] = 32;  // claims two descriptors, holds one
    EXPECT_EQ(parse_list(too_long, kLun).error(), sense::kParameterListLength);
    auto short_header = unmap_list({{0, 8}}, -1);
    EXPECT_EQ(parse_list(short_header, kLun).error(), sense::kParameterListLength);
    EXPECT_EQ(parse_list(unmap_list({{2041, 8}}), kLun).error(), sense::kLbaOutOfRange);
    EXPECT_EQ(parse_list(unmap_list({{~0ull, 2}}), kLun).error(), sense::kLbaOutOfRange);
    const LunInfo huge{.blocks = 1ull << 40};
    EXPECT_EQ(parse_list(unmap_list({{0, kMaxUnmapBlocks + 1}}), huge).error(),
              sense::kInvalidFieldInParameterList);
    EXPECT_EQ(parse_list(unmap_list({{0, kMaxUnmapBlocks}, {1ull << 30, 1}}), huge).error(),
              sense::kInvalidFieldInParameterList)
        << "the limit is on the whole list";
    std::vector<uint8_t> many = unmap_list({});
    many.resize(8 + 16 * (kMaxUnmapDescriptors + 1), 0);
    const size_t length = 16 * (kMaxUnmapDescriptors + 1);
    many[0] = uint8_t((length + 6) >> 8), many[1] = uint8_t(length + 6);
    many[2] = uint8_t(length >> 8), many[3] = uint8_t(length);
    EXPECT_EQ(parse_list(many, kLun).error(), sense::kInvalidFieldInParameterList);
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi
