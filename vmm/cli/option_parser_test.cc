#include "vmm/cli/option_parser.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "vmm/cli/usage_error.h"

namespace mvmm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

enum class Color { Red, Blue };

OptionParser parsed(std::string_view text) {
    OptionParser parser("--thing", {"name", "on", "count", "size", "color"}, "name");
    parser.parse(text);
    return parser;
}

std::string error_of(std::string_view text) {
    try {
        parsed(text);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "no error";
}

template <class Read>
std::string error_reading(std::string_view text, Read read) {
    try {
        read(parsed(text));
    } catch (const UsageError& e) {
        return e.what();
    }
    return "no error";
}

TEST(OptionParser, ReadsTypedValues) {
    const auto parser = parsed("name=x,on=yes,count=7,size=2G,color=blue");
    EXPECT_EQ(parser.get("name"), "x");
    EXPECT_TRUE(parser.toggle("on", false));
    EXPECT_EQ(parser.number("count", 1, 10), 7u);
    EXPECT_EQ(parsed("count=8").power_of_two("count", 2, 16), 8u);
    EXPECT_EQ(parser.size("size"), 2 * GiB);
    EXPECT_EQ(parser.choice("color", {{"red", Color::Red}, {"blue", Color::Blue}}, Color::Red),
              Color::Blue);
}

TEST(OptionParser, AbsentKeysTakeTheFallback) {
    const auto parser = parsed("name=x");
    EXPECT_FALSE(parser.has("on"));
    EXPECT_FALSE(parser.get("on"));
    EXPECT_TRUE(parser.toggle("on", true));
    EXPECT_FALSE(parser.number("count", 1, 10));
    EXPECT_FALSE(parser.power_of_two("count", 1, 16));
    EXPECT_FALSE(parser.size("size"));
    EXPECT_EQ(parser.choice("color", {{"red", Color::Red}}, Color::Blue), Color::Blue);
    EXPECT_FALSE(parsed("").has("name")) << "an empty option has no items";
}

TEST(OptionParser, ABareFirstItemIsTheBareKey) {
    EXPECT_EQ(parsed("thing-1,on=off").get("name"), "thing-1");
    EXPECT_THAT(error_of("on=off,thing-1"), HasSubstr("'thing-1' is not key=value"));
    OptionParser no_bare("--x", {"a"});
    EXPECT_THROW(no_bare.parse("value"), UsageError);
}

TEST(OptionParser, ErrorsAreOneLineNamingTheOptionTheTextAndTheItem) {
    struct Case {
        const char* text;
        const char* expected;
    };
    for (const Case& c : {
             Case{"name=x,,on=on", "--thing 'name=x,,on=on': an empty item"},
             Case{"name=x,", "an empty item"},
             Case{"name=x,colour=red",
                  "unknown key 'colour' (known: name, on, count, size, color)"},
             Case{"name=x,name=y", "name is given twice"},
             Case{"x,name=y", "name is given twice"},
         }) {
        const std::string error = error_of(c.text);
        EXPECT_THAT(error, HasSubstr(c.expected)) << c.text;
        EXPECT_EQ(error.find('\n'), std::string::npos);
    }
}

TEST(OptionParser, BadValuesNameTheItem) {
    EXPECT_EQ(error_reading("on=maybe", [](const auto& p) { p.toggle("on", false); }),
              "--thing 'on=maybe': on=maybe: expected on or off");
    for (const char* bad : {"count=0", "count=11", "count=x", "count=1x", "count=-1",
                            "count=", "count=99999999999999999999999"})
        EXPECT_THAT(error_reading(bad, [](const auto& p) { p.number("count", 1, 10); }),
                    HasSubstr(std::string(bad) + ": expected a number from 1 to 10"));
    for (const char* bad : {"count=0", "count=1", "count=6", "count=32", "count=x", "count=-2"})
        EXPECT_THAT(error_reading(bad, [](const auto& p) { p.power_of_two("count", 2, 16); }),
                    HasSubstr(std::string(bad) + ": expected a power of two from 2 to 16"));
    EXPECT_THAT(error_reading("size=12X", [](const auto& p) { p.size("size"); }),
                HasSubstr("size=12X: size '12X' is not a number"));
    EXPECT_THAT(error_reading(
                    "color=green",
                    [](const auto& p) {
                        p.choice("color", {{"red", Color::Red}, {"blue", Color::Blue}}, Color::Red);
                    }),
                HasSubstr("color=green: expected one of red, blue"));
    EXPECT_THAT(error_reading("on=on", [](const auto& p) { p.required("name"); }),
                HasSubstr("name= is required"));
    EXPECT_THAT(error_reading("name=", [](const auto& p) { p.required("name"); }),
                HasSubstr("name=: must not be empty"));
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
        EXPECT_THROW(parse_size(bad), UsageError) << bad;
}

}  // namespace
}  // namespace mvmm
