// MODE SELECT's parameter lists: the caching page's WCE, and everything that is refused.
#include "devices/virtio/scsi/mode_select.h"

#include <gtest/gtest.h>

#include <vector>

#include "devices/virtio/scsi/responses.h"

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr LunInfo kLun{.blocks = 2048};

// MODE SENSE's answer for `page` as a MODE SELECT list: the same header, the data length 0.
std::vector<uint8_t> list_of(uint8_t page, bool ten, bool block_descriptor) {
    const auto sensed =
        mode_sense_data({.page = page, .block_descriptor = block_descriptor, .ten = ten}, kLun);
    std::vector<uint8_t> list(sensed.begin(), sensed.end());
    list[0] = 0;
    if (ten) list[1] = 0;
    return list;
}

Result<ModeChanges, Sense> parse(std::vector<uint8_t> list, bool ten) {
    const GuestBuffers::Part part(list);
    return parse_mode_parameters(GuestBuffers(std::span(&part, 1)), ten, kLun);
}

TEST(ModeSelect, TheCachingPageSetsTheWriteCache) {
    for (bool ten : {false, true}) {
        auto list = list_of(mode_page::kCaching, ten, true);
        const size_t page = ten ? 16 : 12;
        ASSERT_EQ(list[page], mode_page::kCaching);
        auto unchanged = parse(list, ten);
        ASSERT_TRUE(unchanged) << ten;
        EXPECT_EQ(unchanged->write_cache, true);
        list[page + 2] = 0;
        auto off = parse(list, ten);
        ASSERT_TRUE(off);
        EXPECT_EQ(off->write_cache, false);
        list[page] |= 0x80;  // PS is ignored
        EXPECT_TRUE(parse(list, ten));
    }
}

TEST(ModeSelect, AllPagesWithoutABlockDescriptorAndAnEmptyList) {
    auto all = parse(list_of(mode_page::kAllPages, false, false), false);
    ASSERT_TRUE(all);
    EXPECT_EQ(all->write_cache, true);
    auto control_only = parse(list_of(mode_page::kControl, false, false), false);
    ASSERT_TRUE(control_only);
    EXPECT_FALSE(control_only->write_cache);
    auto header_only = parse({0, 0, 0, 0}, false);
    ASSERT_TRUE(header_only);
    EXPECT_FALSE(header_only->write_cache);
}

TEST(ModeSelect, RefusesWhatCannotChange) {
    auto list = list_of(mode_page::kCaching, false, true);
    auto bad = list;
    bad[12 + 12] = 1;  // a byte of the caching page that is not changeable
    EXPECT_EQ(parse(bad, false).error(), sense::kInvalidFieldInParameterList);
    bad = list;
    bad[4 + 6] = 0x10;  // block length 4096 on a 512-byte LUN
    EXPECT_EQ(parse(bad, false).error(), sense::kInvalidFieldInParameterList);
    bad = list;
    bad[12] = 0x19;  // a page this target does not have
    EXPECT_EQ(parse(bad, false).error(), sense::kInvalidFieldInParameterList);
    bad = list;
    bad[12] |= 0x40;  // SPF: subpages
    EXPECT_EQ(parse(bad, false).error(), sense::kInvalidFieldInParameterList);
    bad = list;
    bad[13] = 10;  // the caching page's length wrong
    EXPECT_EQ(parse(bad, false).error(), sense::kInvalidFieldInParameterList);
    bad = list;
    bad[3] = 16;  // two block descriptors
    EXPECT_EQ(parse(bad, false).error(), sense::kInvalidFieldInParameterList);
}

TEST(ModeSelect, RefusesListsCutShortOrTooLong) {
    auto list = list_of(mode_page::kCaching, false, true);
    list.pop_back();
    EXPECT_EQ(parse(list, false).error(), sense::kParameterListLength) << "a page cut short";
    EXPECT_EQ(parse({0, 0}, false).error(), sense::kParameterListLength) << "half a header";
    EXPECT_EQ(parse({0, 0, 0, 8, 0, 0}, false).error(), sense::kParameterListLength);
    EXPECT_EQ(parse(std::vector<uint8_t>(kMaxModeParameterBytes + 1, 0), false).error(),
              sense::kInvalidFieldInParameterList);
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi
