#include "mem/ram_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace mvmm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

std::string error_of(std::string_view option) {
    try {
        parse_ram_config(option);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "no error";
}

TEST(ParseSize, Suffixes) {
    EXPECT_EQ(parse_size("4K"), 4096u);
    EXPECT_EQ(parse_size("512M"), 512 * MiB);
    EXPECT_EQ(parse_size("8g"), 8 * GiB);
    EXPECT_EQ(parse_size("1T"), 1024 * GiB);
    EXPECT_EQ(parse_size("2048"), 2 * GiB);  // a bare number is MiB, as in QEMU's -m
}

TEST(ParseSize, Rejects) {
    for (const char* bad :
         {"", "G", "12X", "1.5G", "12GB", "-1G", "99999999999T", "99999999999999999999999"})
        EXPECT_THROW(parse_size(bad), std::invalid_argument) << bad;
}

TEST(FormatSize, PicksTheLargestWholeUnit) {
    EXPECT_EQ(format_size(0), "0 bytes");
    EXPECT_EQ(format_size(1000), "1000 bytes");
    EXPECT_EQ(format_size(4096), "4 KiB");
    EXPECT_EQ(format_size(512 * MiB), "512 MiB");
    EXPECT_EQ(format_size(GiB + GiB / 2), "1.5 GiB");
    EXPECT_EQ(format_size(8 * GiB), "8 GiB");
}

TEST(ParseRamConfig, BareSizeTakesDefaults) {
    const RamConfig config = parse_ram_config("512M");
    EXPECT_EQ(config, RamConfig{.size = 512 * MiB});
    EXPECT_EQ(config.prealloc_method, PreallocMethod::populate);
    EXPECT_FALSE(config.prealloc);
    EXPECT_EQ(parse_ram_config("size=512M"), config);
}

TEST(ParseRamConfig, EveryKey) {
    const RamConfig config = parse_ram_config(
        "size=8G,hugepages=1G,shared=on,path=/dev/hugepages,prealloc=on,prealloc-threads=4,"
        "prealloc-method=touch,host-node=1");
    EXPECT_EQ(config, (RamConfig{.size = 8 * GiB,
                                 .hugepages = HugePages::size_1g,
                                 .shared = true,
                                 .path = "/dev/hugepages",
                                 .prealloc = true,
                                 .prealloc_threads = 4,
                                 .prealloc_method = PreallocMethod::touch,
                                 .host_node = 1u}));
}

TEST(ParseRamConfig, ValueSpellings) {
    EXPECT_EQ(parse_ram_config("1G,hugepages=2M").hugepages, HugePages::size_2m);
    EXPECT_EQ(parse_ram_config("1G,hugepages=2048K").hugepages, HugePages::size_2m);
    EXPECT_EQ(parse_ram_config("1G,hugepages=none").hugepages, HugePages::none);
    EXPECT_EQ(parse_ram_config("1G,hugepages=off").hugepages, HugePages::none);
    EXPECT_FALSE(parse_ram_config("1G,shared=off").shared);
    EXPECT_TRUE(parse_ram_config("1G,shared=yes").shared);
    EXPECT_EQ(parse_ram_config("1G,prealloc=on,prealloc-threads=auto").prealloc_threads, 0u);
    EXPECT_EQ(parse_ram_config("1G,prealloc=on,prealloc-method=populate").prealloc_method,
              PreallocMethod::populate);
}

TEST(ParseRamConfig, ErrorsNameTheBadItem) {
    struct Case {
        const char* option;
        const char* expected;
    };
    for (const Case& c : {
             Case{"", "empty item"},
             Case{"1G,", "empty item"},
             Case{"1G,,shared=on", "empty item"},
             Case{"hugepages=2M", "needs a size"},
             Case{"size=", "'size=': no value"},
             Case{"size=12X", "'size=12X'"},
             Case{"size=0", "cannot be empty"},
             Case{"1G,2G", "'2G': expected key=value"},
             Case{"size=1G,size=2G", "size is given twice"},
             Case{"1G,size=2G", "size is given twice"},
             Case{"1G,memory=2G", "'memory=2G': unknown key"},
             Case{"1G,hugepages=3M", "'hugepages=3M': hugepages must be none, 2M or 1G"},
             Case{"1G,hugepages=huge", "hugepages must be"},
             Case{"1G,shared=maybe", "'shared=maybe': expected on or off"},
             Case{"1G,prealloc=on,prealloc-threads=x", "'prealloc-threads=x': expected a number"},
             Case{"1G,prealloc=on,prealloc-threads=4x", "expected a number"},
             Case{"1G,prealloc=on,prealloc-threads=5000", "from 0 to 1024"},
             Case{"1G,prealloc=on,prealloc-method=memset", "must be touch or populate"},
             Case{"1G,prealloc-threads=4", "need prealloc=on"},
             Case{"1G,prealloc=off,prealloc-method=touch", "need prealloc=on"},
             Case{"1G,host-node=-1", "'host-node=-1'"},
             Case{"3M,hugepages=2M", "size 3 MiB is not a whole number of 2 MiB pages"},
             Case{"1536M,hugepages=1G", "1.5 GiB is not a whole number of 1 GiB pages"},
             Case{"5K", "5 KiB is not a whole number of 4 KiB pages"},
         })
        EXPECT_THAT(error_of(c.option), HasSubstr(c.expected)) << c.option;
}

}  // namespace
}  // namespace mvmm
