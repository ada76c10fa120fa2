#include "vmm/cli/command_line.h"
#include "vmm/cli/usage_error.h"
#include "vmm/cli/validate.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "vmm/boot/fake_bzimage.h"
#include "vmm/kvm/host_check.h"

namespace mvmm {
namespace {

Config parse(std::vector<std::string> args) {
    args.insert(args.begin(), "mvmm");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

// The message names the option the user has to change.
void expect_usage_error(const std::function<void()>& f, const std::string& fragment) {
    try {
        f();
        ADD_FAILURE() << "accepted; expected an error naming " << fragment;
    } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
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
    EXPECT_THROW(parse({"--kernel", "k", "--vcpu-watchdog", "3601"}), UsageError);
    EXPECT_THROW(parse({"--kernel", "k", "--vcpu-watchdog", "-1"}), UsageError);
}

TEST(Config, VcpuWatchdogIsOffUnlessAsked) {
    EXPECT_EQ(parse({"--kernel", "k"}).vcpu_watchdog, 0u);
    EXPECT_EQ(parse({"--kernel", "k", "--vcpu-watchdog", "30"}).vcpu_watchdog, 30u);
}

TEST(Config, ParsesScsiControllersBeforeTheDisksThatNameThem) {
    auto c = parse({"--kernel", "k", "--disk", "path=a.img,controller=c1", "--disk", "path=b.img",
                    "--scsi-controller", "id=c0", "--scsi-controller", "id=c1,queues=2,bus=root",
                    "--disk", "path=c.img,controller=c1,lun=7"});
    ASSERT_EQ(c.disks.blk.size(), 1u);
    EXPECT_EQ(c.disks.blk[0].path, "b.img");
    ASSERT_EQ(c.disks.scsi.size(), 2u);
    EXPECT_TRUE(c.disks.scsi[0].controller.luns.empty());  // allowed: an empty SCSI host
    const auto& c1 = c.disks.scsi[1].controller;
    EXPECT_EQ(c1.id, "c1");
    EXPECT_EQ(c1.request_queues, 2);
    EXPECT_EQ(c.disks.scsi[1].bus, devices::virtio::blk::DiskBus::Root);
    ASSERT_EQ(c1.luns.size(), 2u);
    EXPECT_EQ(c1.luns[0].path, "a.img");
    EXPECT_EQ(c1.luns[0].lun, 0);
    EXPECT_EQ(c1.luns[1].lun, 7);
}

TEST(Config, ScsiControllerIdsAreUnique) {
    expect_usage_error(
        [] {
            parse({"--kernel", "k", "--scsi-controller", "id=c0", "--scsi-controller", "id=c0"});
        },
        "--scsi-controller 'id=c0': id=c0 is given twice");
    expect_usage_error(
        [] {
            parse({"--kernel", "k", "--disk", "path=a,controller=c0"});
        },
        "no --scsi-controller has id=c0");
}

TEST(Config, ParsesMemoryAndTrimOptions) {
    auto c = parse({"--kernel", "k", "--memory", "size=2G,prealloc=on", "--trim-policy", "adaptive",
                    "--trim-factor", "50"});
    EXPECT_EQ(c.memory.size, 2ull << 30);
    EXPECT_TRUE(c.memory.prealloc);
    EXPECT_EQ(c.trim.policy, rcu::TrimPolicyKind::adaptive);
    EXPECT_EQ(c.trim.factor, 50);
}

TEST(Config, DisksAndControllersHaveAQueuePerVcpu) {
    // --cpus comes after the options it applies to: the whole line parses first.
    auto c = parse({"--kernel", "k", "--disk", "path=a", "--scsi-controller", "id=c0", "--disk",
                    "path=b,queues=1", "--cpus", "3"});
    EXPECT_EQ(c.disks.blk.at(0).queues, 3);
    EXPECT_EQ(c.disks.blk.at(1).queues, 1);
    EXPECT_EQ(c.disks.scsi.at(0).controller.request_queues, 3);
    EXPECT_EQ(parse({"--kernel", "k", "--disk", "path=a"}).disks.blk.at(0).queues, 1);
}

TEST(Config, RequestAllocGoesToEveryDiskAndController) {
    EXPECT_EQ(parse({"--kernel", "k", "--disk", "path=a"}).disks.blk[0].request_alloc,
              SlotSource::pool);
    auto c = parse({"--kernel", "k", "--disk", "path=a", "--request-alloc", "calloc", "--disk",
                    "path=b", "--scsi-controller", "id=c0", "--disk", "path=c,controller=c0"});
    EXPECT_EQ(c.request_alloc, SlotSource::calloc);
    ASSERT_EQ(c.disks.blk.size(), 2u);
    EXPECT_EQ(c.disks.blk[0].request_alloc, SlotSource::calloc);
    EXPECT_EQ(c.disks.blk[1].request_alloc, SlotSource::calloc);
    ASSERT_EQ(c.disks.scsi.size(), 1u);
    EXPECT_EQ(c.disks.scsi[0].controller.request_alloc, SlotSource::calloc);
    EXPECT_THROW(parse({"--kernel", "k", "--request-alloc", "slab"}), UsageError);
}

TEST(Config, CacheAllocGoesToEveryImage) {
    using devices::block::qcow2::CacheAlloc;
    EXPECT_EQ(parse({"--kernel", "k", "--disk", "path=a"}).disks.blk[0].image.qcow2.cache_alloc,
              CacheAlloc::Mapping);
    auto c = parse({"--kernel", "k", "--disk", "path=a", "--cache-alloc", "heap",
                    "--scsi-controller", "id=c0", "--disk", "path=c,controller=c0"});
    EXPECT_EQ(c.disks.blk[0].image.qcow2.cache_alloc, CacheAlloc::Heap);
    EXPECT_EQ(c.disks.scsi[0].controller.luns[0].image.qcow2.cache_alloc, CacheAlloc::Heap);
    EXPECT_THROW(parse({"--kernel", "k", "--cache-alloc", "slab"}), UsageError);
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

TEST(Config, TrimFactorErrorsNameTrimFactor) {
    for (const char* factor : {"nan", "inf", "0", "-1"})
        expect_usage_error(
            [&] {
                parse({"--kernel", "k", "--trim-factor", factor});
            },
            "--trim-factor");
}

TEST(Config, IoThreadsAreBounded) {
    EXPECT_EQ(parse({"--kernel", "k", "--io-threads", "64"}).io_threads, 64u);
    for (const char* count : {"0", "65", "100000", "-1"})
        expect_usage_error(
            [&] {
                parse({"--kernel", "k", "--io-threads", count});
            },
            "--io-threads");
}

class Validate : public ::testing::Test {
  protected:
    Validate() {
        auto image = boot::make_bzimage();
        std::ofstream(kernel, std::ios::binary)
            .write(reinterpret_cast<const char*>(image.data()), std::streamsize(image.size()));
        config.kernel = kernel.string();
    }
    ~Validate() override { std::filesystem::remove_all(dir); }

    std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() / "mvmm_validate_test";
        std::filesystem::create_directories(d);
        return d;
    }();
    std::filesystem::path kernel = dir / "kernel";
    Config config;
};

TEST_F(Validate, DisksPastWhatPciBus0HoldsAreUsageErrors) {
    using devices::virtio::blk::DiskBus;
    devices::virtio::blk::DiskConfig on_root;
    on_root.bus = DiskBus::Root;
    auto& disks = config.disks.blk;
    disks.resize(248);
    EXPECT_NO_THROW(validate(config));
    disks.resize(249);
    expect_usage_error([&] { validate(config); }, "--disk");
    disks.assign(31, on_root);
    EXPECT_NO_THROW(validate(config));
    disks.push_back(on_root);
    expect_usage_error([&] { validate(config); }, "--disk");
    disks.back().bus = DiskBus::RootPort;
    expect_usage_error([&] { validate(config); }, "--disk");
}

TEST_F(Validate, ScsiControllersTakeRootPortsAndSlotsAsDisksDo) {
    using devices::virtio::blk::DiskBus;
    config.disks.blk.resize(247);
    config.disks.scsi.resize(1);
    EXPECT_NO_THROW(validate(config));
    config.disks.scsi.resize(2);
    expect_usage_error([&] { validate(config); }, "--scsi-controller");
    config.disks.blk.clear();
    config.disks.scsi.assign(31, ScsiControllerOption{.controller = {}, .bus = DiskBus::Root});
    EXPECT_NO_THROW(validate(config));
    config.disks.blk.resize(1);
    expect_usage_error([&] { validate(config); }, "--scsi-controller");
}

TEST_F(Validate, EmptyRootPortsCountAsRootPorts) {
    config.disks.scsi.resize(1);
    config.empty_root_ports = 247;
    EXPECT_NO_THROW(validate(config));
    config.empty_root_ports = 248;
    expect_usage_error([&] { validate(config); }, "--root-ports");
    expect_usage_error([] { parse({"--kernel", "k", "--root-ports", "249"}); }, "--root-ports");
    // The old name still works.
    EXPECT_EQ(parse({"--kernel", "k", "--empty-root-ports", "7"}).empty_root_ports, 7u);
    expect_usage_error(
        [] {
            parse({"--kernel", "k", "--empty-root-ports", "249"});
        },
        "--root-ports");
}

TEST_F(Validate, AnInitrdThatCannotBePlacedIsAUsageError) {
    config.initrd = (dir / "initrd").string();
    std::ofstream(config.initrd).close();
    std::filesystem::resize_file(config.initrd, 1 << 20);
    EXPECT_NO_THROW(validate(config));
    config.memory.size = 64 << 20;
    std::filesystem::resize_file(config.initrd, 60 << 20);  // over the kernel at 16-24 MiB
    expect_usage_error([&] { validate(config); }, "--initrd");
}

TEST_F(Validate, TheSerialFileMustBeCreatable) {
    config.serial = {SerialConfig::Kind::File, (dir / "serial.log").string()};
    EXPECT_NO_THROW(validate(config));
    EXPECT_FALSE(std::filesystem::exists(dir / "serial.log"));  // checked, not created
    config.serial.path = (dir / "no-such-dir" / "serial.log").string();
    expect_usage_error([&] { validate(config); }, "--serial");
    config.serial.path = dir.string();
    expect_usage_error([&] { validate(config); }, "--serial");
}

TEST_F(Validate, ACommandLineTheKernelRefusesIsAUsageError) {
    config.cmdline = std::string(2047, 'x');  // the header's cmdline_size
    EXPECT_NO_THROW(validate(config));
    config.cmdline += 'x';
    expect_usage_error([&] { validate(config); }, "--cmdline");
}

TEST_F(Validate, TheApiSocketMustBeCreatableAndNeverReplacesAFile) {
    config.api_socket = (dir / "api.sock").string();
    EXPECT_NO_THROW(validate(config));
    EXPECT_FALSE(std::filesystem::exists(dir / "api.sock"));  // checked, not created
    config.api_socket = (dir / "no-such-dir" / "api.sock").string();
    expect_usage_error([&] { validate(config); }, "--api-socket");
    config.api_socket = (dir / std::string(120, 's')).string();
    expect_usage_error([&] { validate(config); }, "--api-socket");
    config.api_socket = kernel.string();
    expect_usage_error([&] { validate(config); }, "--api-socket");
    EXPECT_GT(std::filesystem::file_size(kernel), 0u);
}

TEST_F(Validate, RamTheHostCannotGiveIsAUsageErrorBeforeAnythingIsMapped) {
    config.memory.path = (dir / "no-such-dir").string();
    expect_usage_error([&] { validate(config); }, "--memory");
    config.memory.path = dir.string();
    config.memory.hugepages = HugePages::size_2m;  // a tmp directory is no hugetlbfs mount
    expect_usage_error([&] { validate(config); }, "--memory");
    config.memory.path.clear();
    config.memory.hugepages = HugePages::none;
    EXPECT_NO_THROW(validate(config));
    config.memory.host_node = 1000;
    expect_usage_error([&] { validate(config); }, "--memory");
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
