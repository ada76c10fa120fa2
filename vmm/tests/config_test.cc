#include "vmm/config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "vmm/host_check.h"
#include "vmm/tests/fake_bzimage.h"

namespace mvmm {
namespace {

Config parse(std::vector<std::string> args) {
    args.insert(args.begin(), "mvmm");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

TEST(Config, ParsesOptions) {
    auto c = parse({"--kernel", "k", "--cpus", "2", "--memory", "1G", "--serial", "file:/tmp/x"});
    EXPECT_EQ(c.kernel, "k");
    EXPECT_EQ(c.cpus, 2u);
    EXPECT_EQ(c.memory.size, 1ull << 30);
    EXPECT_EQ(c.serial.kind, SerialConfig::Kind::File);
    EXPECT_EQ(c.serial.path, "/tmp/x");
}

TEST(Config, RejectsBadOptions) {
    EXPECT_THROW(parse({}), UsageError);  // --kernel is required
    EXPECT_THROW(parse({"--kernel", "k", "--bogus"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--cpus", "two"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--serial", "tcp:1"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--log-level", "loud"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--memory", "size=1G,hugepages=3M"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--trim-policy", "sometimes"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--trim-factor", "-1"}), UsageError);
}

TEST(Config, ParsesMemoryAndTrimOptions) {
    auto c = parse({"--kernel", "k", "--memory", "size=2G,prealloc=on", "--trim-policy", "adaptive",
                    "--trim-factor", "50"});
    EXPECT_EQ(c.memory.size, 2ull << 30);
    EXPECT_TRUE(c.memory.prealloc);
    EXPECT_EQ(c.trim.policy, rcu::TrimPolicyKind::adaptive);
    EXPECT_EQ(c.trim.factor, 50);
}

TEST(Config, ValidateChecksFilesAndRanges) {
    auto dir = std::filesystem::temp_directory_path();
    auto kernel = dir / "mvmm_config_test_kernel";
    auto image = boot::make_bzimage();
    std::ofstream(kernel, std::ios::binary)
        .write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
    Config c;
    c.kernel = kernel;
    EXPECT_NO_THROW(validate(c));
    c.cpus = 0;
    EXPECT_THROW(validate(c), UsageError);
    c.cpus = 1;
    c.memory.size = 1 << 20;
    EXPECT_THROW(validate(c), UsageError);
    c.memory.size = 100000ull << 30;
    EXPECT_THROW(validate(c), UsageError);
    c.memory.size = 512 << 20;
    c.kernel = (dir / "does-not-exist").string();
    EXPECT_THROW(validate(c), UsageError);
    c.kernel = dir.string();  // a directory
    EXPECT_THROW(validate(c), UsageError);
    std::ofstream(kernel) << "not a kernel";
    c.kernel = kernel.string();
    EXPECT_THROW(validate(c), UsageError);
    std::filesystem::remove(kernel);
}

TEST(HostCheck, RecognizesPvmAndMissingKvm) {
    auto dir = std::filesystem::temp_directory_path() / "mvmm_host_check_test";
    std::filesystem::create_directories(dir / "module" / "kvm_pvm");
    std::ofstream(dir / "kvm") << "";
    auto why = host_cannot_run_guests((dir / "module").string(), (dir / "kvm").string());
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("PVM"), std::string::npos);
    EXPECT_NE(why->find("mvmm-hostvm"), std::string::npos);
    std::filesystem::remove_all(dir / "module" / "kvm_pvm");
    EXPECT_FALSE(host_cannot_run_guests((dir / "module").string(), (dir / "kvm").string()));
    why = host_cannot_run_guests((dir / "module").string(), (dir / "nokvm").string());
    ASSERT_TRUE(why);
    EXPECT_NE(why->find("no KVM"), std::string::npos);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mvmm
