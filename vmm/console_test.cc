#include "vmm/console.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace mvmm {
namespace {

std::string contents(const std::filesystem::path& path) {
    std::ostringstream out;
    out << std::ifstream(path).rdbuf();
    return out.str();
}

// A run that fails its checks after the console exists must not wipe the last run's log.
TEST(Console, TheOutputFileIsEmptiedOnlyWhenTheGuestStarts) {
    const auto path = std::filesystem::temp_directory_path() / "mvmm_console_test.log";
    std::ofstream(path) << "the last run's log\n";
    {
        Console console({SerialConfig::Kind::File, path.string()});
        EXPECT_EQ(contents(path), "the last run's log\n");
    }
    EXPECT_EQ(contents(path), "the last run's log\n");
    Console console({SerialConfig::Kind::File, path.string()});
    console.start([](std::span<const uint8_t>) {});
    EXPECT_EQ(contents(path), "");
    std::filesystem::remove(path);
}

}  // namespace
}  // namespace mvmm
