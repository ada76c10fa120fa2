#include "mem/ram_config.h"

#include <gtest/gtest.h>

#include <string>

namespace mvmm {
namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

TEST(FormatSize, PicksTheLargestWholeUnit) {
    EXPECT_EQ(format_size(0), "0 bytes");
    EXPECT_EQ(format_size(1000), "1000 bytes");
    EXPECT_EQ(format_size(4096), "4 KiB");
    EXPECT_EQ(format_size(512 * MiB), "512 MiB");
    EXPECT_EQ(format_size(GiB + GiB / 2), "1.5 GiB");
    EXPECT_EQ(format_size(8 * GiB), "8 GiB");
}

TEST(PageSizeOf, HugePageKinds) {
    EXPECT_EQ(page_size_of(HugePages::size_2m), 2 * MiB);
    EXPECT_EQ(page_size_of(HugePages::size_1g), GiB);
    EXPECT_EQ(page_size_of(HugePages::none), base_page_size());
}

}  // namespace
}  // namespace mvmm
