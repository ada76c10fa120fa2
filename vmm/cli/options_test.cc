#include "vmm/cli/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "vmm/cli/usage_error.h"

namespace mvmm {
namespace {

using ::testing::HasSubstr;
namespace blk = devices::virtio::blk;

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

template <class Parse>
std::string error_of(Parse parse, std::string_view text) {
    try {
        parse(text);
    } catch (const UsageError& e) {
        return e.what();
    }
    return "no error";
}

devices::virtio::blk::DiskConfig parse_disk_option(std::string_view text) {
    DiskOptions disks;
    add_disk_option(text, disks);
    EXPECT_EQ(disks.blk.size(), 1u);
    return disks.blk.at(0);
}

TEST(DiskOption, ParsesEveryKey) {
    const auto config = parse_disk_option(
        "path=/images/a.raw,readonly=on,serial=SN-1,queues=4,queue-size=64,bus=root");
    EXPECT_EQ(config.path, "/images/a.raw");
    EXPECT_TRUE(config.read_only);
    EXPECT_EQ(config.serial, "SN-1");
    EXPECT_EQ(config.queues, 4);
    EXPECT_EQ(config.queue_size, 64);
    EXPECT_EQ(config.bus, blk::DiskBus::Root);
}

TEST(DiskOption, BlockSizes) {
    const auto config =
        parse_disk_option("path=a,logical-block-size=4096,physical-block-size=8192");
    EXPECT_EQ(config.logical_block_size, 4096u);
    EXPECT_EQ(config.physical_block_size, 8192u);
    const auto plain = parse_disk_option("path=a");
    EXPECT_EQ(plain.logical_block_size, 512u);
    EXPECT_EQ(plain.physical_block_size, 512u) << "the logical size";
}

TEST(DiskOption, HasDefaults) {
    const auto config = parse_disk_option("path=disk.img");
    EXPECT_FALSE(config.read_only);
    EXPECT_FALSE(config.serial);
    EXPECT_EQ(config.queues, 1);
    EXPECT_EQ(config.queue_size, 256);
    EXPECT_EQ(config.bus, blk::DiskBus::RootPort);
    EXPECT_FALSE(parse_disk_option("path=d,readonly=off,bus=rootport").read_only);
    EXPECT_EQ(parse_disk_option("path=d,queues=64").queues, 64);
    EXPECT_EQ(parse_disk_option("path=d,queue-size=4").queue_size, 4);
    EXPECT_EQ(parse_disk_option("path=d,queue-size=1024").queue_size, 1024);
    EXPECT_EQ(parse_disk_option("path=d,serial=").serial, "");
    EXPECT_EQ(parse_disk_option("path=d,serial=12345678901234567890").serial->size(), 20u);
}

TEST(DiskOption, RejectsBadOptionsNamingTheProblem) {
    const std::pair<const char*, const char*> cases[] = {
        {"", "path= is required"},
        {"readonly=on", "path= is required"},
        {"path=", "path=: must not be empty"},
        {"path=a,,readonly=on", "empty item"},
        {"path=a,", "empty item"},
        {"path=a,readonly", "'readonly' is not key=value"},
        {"path=a,readonly=maybe", "readonly=maybe: expected on or off"},
        {"path=a,queues=0", "queues=0: expected a number from 1 to 64"},
        {"path=a,queues=65", "queues=65: expected a number"},
        {"path=a,queues=2x", "queues=2x: expected a number"},
        {"path=a,queues=", "queues=: expected a number"},
        {"path=a,queue-size=0", "queue-size=0: expected a power of two from 4 to 1024"},
        {"path=a,queue-size=2", "queue-size=2: expected a power of two from 4 to 1024"},
        {"path=a,queue-size=3", "queue-size=3: expected a power of two"},
        {"path=a,queue-size=96", "queue-size=96: expected a power of two"},
        {"path=a,queue-size=2048", "queue-size=2048: expected a power of two"},
        {"path=a,queue-size=-1", "queue-size=-1: expected a power of two"},
        {"path=a,queue-size=abc", "queue-size=abc: expected a power of two"},
        {"path=a,queue-size=", "queue-size=: expected a power of two"},
        {"path=a,serial=123456789012345678901", "longer than 20 bytes"},
        {"path=a,serial=caf\xc3\xa9", "printable ASCII"},
        {"path=a,bus=pci", "bus=pci: expected one of rootport, root"},
        {"path=a,size=1G", "unknown key 'size'"},
        {"path=a,path=b", "path is given twice"},
        {"path=a,lun=1", "lun=1: a SCSI address needs controller="},
        {"path=a,target=1", "target=1: a SCSI address needs controller="},
        {"path=a,logical-block-size=1024", "logical-block-size must be 512 or 4096"},
        {"path=a,logical-block-size=8192", "logical-block-size=8192: expected a number"},
        {"path=a,logical-block-size=4096,physical-block-size=512",
         "physical-block-size must be a power of two from logical-block-size (4096)"},
        {"path=a,physical-block-size=3000", "physical-block-size must be a power of two"},
    };
    for (auto [option, message] : cases) {
        const std::string error = error_of(parse_disk_option, option);
        EXPECT_THAT(error, HasSubstr(message)) << option;
        EXPECT_THAT(error, HasSubstr(std::string("--disk '") + option + "'")) << option;
    }
}

TEST(DiskOption, Qcow2CacheKeysHaveQemusNamesDefaultsAndUnits) {
    using namespace std::chrono_literals;
    const auto defaults = parse_disk_option("path=d.qcow2").image.qcow2;
    EXPECT_EQ(defaults.l2_cache_size, 32 * MiB);
    EXPECT_EQ(defaults.refcount_cache_size, 0u);  // four clusters
    EXPECT_EQ(defaults.cache_clean_interval, 600s);
    const auto given = parse_disk_option(
                           "path=d.qcow2,format=qcow2,l2-cache-size=4M,refcount-cache-size=262144,"
                           "cache-clean-interval=0")
                           .image;
    EXPECT_EQ(given.format, devices::block::ImageFormat::Qcow2);
    EXPECT_EQ(given.qcow2.l2_cache_size, 4 * MiB);
    EXPECT_EQ(given.qcow2.refcount_cache_size, 262144u) << "a bare size is bytes, as QEMU's";
    EXPECT_EQ(given.qcow2.cache_clean_interval, 0s);
    EXPECT_EQ(parse_disk_option("path=d,l2-cache-size=1g").image.qcow2.l2_cache_size, GiB);
    const std::pair<const char*, const char*> cases[] = {
        {"path=a,format=vmdk", "format=vmdk: expected one of raw, qcow2"},
        {"path=a,l2-cache-size=12Q", "l2-cache-size=12Q: size '12Q' is not a number"},
        {"path=a,l2-cache-size=", "l2-cache-size=: size '' is not a number"},
        {"path=a,refcount-cache-size=-1", "refcount-cache-size=-1: size '-1' is not a number"},
        {"path=a,l2-cache-size=18446744073709551615K", "is too large"},
        {"path=a,cache-clean-interval=soon", "cache-clean-interval=soon: expected a number"},
        {"path=a,cache-clean-interval=4294967296", "cache-clean-interval=4294967296: expected"},
        {"path=a,format=raw,l2-cache-size=1M", "l2-cache-size=1M: a qcow2 key; format=raw"},
        {"path=a,format=raw,cache-clean-interval=5", "cache-clean-interval=5: a qcow2 key"},
    };
    for (auto [option, message] : cases)
        EXPECT_THAT(error_of(parse_disk_option, option), HasSubstr(message)) << option;
}

TEST(DiskOption, AioAndCacheModes) {
    using devices::block::AioMode;
    using devices::block::CacheMode;
    const auto defaults = parse_disk_option("path=d");
    EXPECT_EQ(defaults.aio, std::nullopt) << "io_uring where the kernel has it: the device probes";
    EXPECT_EQ(defaults.image.cache, CacheMode::Writeback);
    EXPECT_EQ(parse_disk_option("path=d,aio=io_uring").aio, AioMode::IoUring);
    EXPECT_EQ(parse_disk_option("path=d,aio=threads").aio, AioMode::Threads);
    EXPECT_EQ(parse_disk_option("path=d,aio=sync").aio, AioMode::Sync);
    EXPECT_EQ(parse_disk_option("path=d,cache=none").image.cache, CacheMode::None);
    EXPECT_THAT(error_of(parse_disk_option, "path=d,aio=native"),
                HasSubstr("aio=native: expected one of io_uring, threads, sync"));
    EXPECT_THAT(error_of(parse_disk_option, "path=d,cache=off"),
                HasSubstr("cache=off: expected one of writeback, none"));
}

TEST(CacheAllocOption, NamesWhereCachedTablesLive) {
    using devices::block::qcow2::CacheAlloc;
    EXPECT_EQ(parse_cache_alloc_option("mapping"), CacheAlloc::Mapping);
    EXPECT_EQ(parse_cache_alloc_option("heap"), CacheAlloc::Heap);
    EXPECT_THAT(error_of(parse_cache_alloc_option, "slab"),
                HasSubstr("--cache-alloc 'slab': slab: expected one of mapping, heap"));
}

TEST(DiskOption, QueuesDefaultToOnePerVcpuWithinTheLimit) {
    for (auto [vcpus, queues] : {std::pair{2u, 2}, {64u, 64}, {255u, 64}}) {
        DiskOptions disks;
        disks.default_queues = vcpus;
        add_disk_option("path=a", disks);
        add_disk_option("path=b,queues=3", disks);
        EXPECT_EQ(disks.blk.at(0).queues, queues) << vcpus << " vCPUs";
        EXPECT_EQ(disks.blk.at(1).queues, 3) << "queues= wins";
        EXPECT_EQ(parse_scsi_controller_option("id=c", vcpus).controller.request_queues, queues);
        EXPECT_EQ(parse_scsi_controller_option("id=c,queues=1", vcpus).controller.request_queues,
                  1);
    }
}

TEST(ScsiControllerOption, ParsesEveryKeyWithDefaults) {
    const auto option = parse_scsi_controller_option("id=c0,queues=4,queue-size=64,bus=root");
    EXPECT_EQ(option.controller.id, "c0");
    EXPECT_EQ(option.controller.request_queues, 4);
    EXPECT_EQ(option.controller.queue_size, 64);
    EXPECT_EQ(option.bus, blk::DiskBus::Root);
    EXPECT_TRUE(option.controller.luns.empty());
    const auto plain = parse_scsi_controller_option("id=x");
    EXPECT_EQ(plain.controller.request_queues, 1);
    EXPECT_EQ(plain.controller.queue_size, 256);
    EXPECT_EQ(plain.bus, blk::DiskBus::RootPort);
    EXPECT_EQ(plain.controller.targets, 0) << "up to the highest target of its LUNs";
    EXPECT_EQ(parse_scsi_controller_option("id=x,targets=256").controller.targets, 256);
    for (auto [option, message] : std::initializer_list<std::pair<const char*, const char*>>{
             {"", "id= is required"},
             {"id=", "id=: must not be empty"},
             {"id=c0,queues=0", "queues=0: expected a number from 1 to 64"},
             {"id=c0,queues=65", "queues=65: expected a number from 1 to 64"},
             {"id=c0,queue-size=0", "queue-size=0: expected a power of two from 4 to 1024"},
             {"id=c0,queue-size=3", "queue-size=3: expected a power of two from 4 to 1024"},
             {"id=c0,queue-size=2048", "queue-size=2048: expected a power of two"},
             {"id=c0,queue-size=abc", "queue-size=abc: expected a power of two"},
             {"id=c0,bus=pci", "bus=pci: expected one of rootport, root"},
             {"id=c0,lun=1", "unknown key 'lun'"},
             {"id=c0,targets=0", "targets=0: expected a number from 1 to 256"},
             {"id=c0,targets=257", "targets=257: expected a number from 1 to 256"},
         }) {
        const std::string error = error_of(
            [](std::string_view text) { return parse_scsi_controller_option(text); }, option);
        EXPECT_THAT(error, HasSubstr(message)) << option;
        EXPECT_THAT(error, HasSubstr(std::string("--scsi-controller '") + option + "'")) << option;
    }
}

// Two controllers, c0 and c1, and the LUNs of `disks` added to them in order.
DiskOptions scsi_disks(const std::vector<const char*>& disks) {
    DiskOptions options;
    options.scsi = {parse_scsi_controller_option("id=c0"),
                    parse_scsi_controller_option("id=c1,targets=2")};
    for (const char* disk : disks) add_disk_option(disk, options);
    return options;
}

TEST(ScsiDiskOption, GoesToItsControllerWithEveryKey) {
    const auto options =
        scsi_disks({"path=/images/a.raw,controller=c1,lun=300,readonly=on,serial=S-1"});
    EXPECT_TRUE(options.blk.empty());
    EXPECT_TRUE(options.scsi[0].controller.luns.empty());
    ASSERT_EQ(options.scsi[1].controller.luns.size(), 1u);
    const auto& lun = options.scsi[1].controller.luns[0];
    EXPECT_EQ(lun.path, "/images/a.raw");
    EXPECT_EQ(lun.lun, 300);
    EXPECT_TRUE(lun.read_only);
    EXPECT_EQ(lun.serial, "S-1");
}

// aio= and cache= as a virtio-blk disk takes them: unset, io_uring where the kernel has it.
TEST(ScsiDiskOption, TakesAioAndCacheModes) {
    using devices::block::AioMode;
    using devices::block::CacheMode;
    const auto options = scsi_disks({"path=a,controller=c0", "path=b,controller=c0,aio=threads",
                                     "path=c,controller=c0,aio=sync,cache=none"});
    const auto& luns = options.scsi[0].controller.luns;
    ASSERT_EQ(luns.size(), 3u);
    EXPECT_EQ(luns[0].aio, std::nullopt);
    EXPECT_EQ(luns[0].image.cache, CacheMode::Writeback);
    EXPECT_EQ(luns[1].aio, AioMode::Threads);
    EXPECT_EQ(luns[2].aio, AioMode::Sync);
    EXPECT_EQ(luns[2].image.cache, CacheMode::None);
}

TEST(ScsiDiskOption, TakesTheLowestFreeLunAndTheFileNameAsSerial) {
    const auto options =
        scsi_disks({"path=d/a.img,controller=c0,lun=1", "path=d/b.img,controller=c0",
                    "path=d/c.img,controller=c0", "path=d/d.img,controller=c1",
                    "path=d/a-very-long-file-name-for-a-disk-image-01.img,controller=c0"});
    const auto& luns = options.scsi[0].controller.luns;
    ASSERT_EQ(luns.size(), 4u);
    EXPECT_EQ(luns[1].lun, 0);
    EXPECT_EQ(luns[1].serial, "b.img");
    EXPECT_EQ(luns[2].lun, 2);
    EXPECT_FALSE(luns[2].read_only);
    EXPECT_EQ(luns[3].serial, "ng-file-name-for-a-disk-image-01.img");  // the last 36 bytes
    EXPECT_EQ(options.scsi[1].controller.luns[0].lun, 0);
}

TEST(ScsiDiskOption, TargetsNumberTheirLunsApart) {
    const auto options = scsi_disks({"path=a,controller=c0,target=3",
                                     "path=b,controller=c0,target=3", "path=c,controller=c0",
                                     "path=d,controller=c0,target=255,lun=9,"
                                     "logical-block-size=4096"});
    const auto& luns = options.scsi[0].controller.luns;
    ASSERT_EQ(luns.size(), 4u);
    EXPECT_EQ(luns[0].target, 3);
    EXPECT_EQ(luns[0].lun, 0);
    EXPECT_EQ(luns[1].lun, 1) << "the next free LUN of target 3";
    EXPECT_EQ(luns[2].target, 0);
    EXPECT_EQ(luns[2].lun, 0) << "target 0's LUN 0 is free";
    EXPECT_EQ(luns[3].target, 255);
    EXPECT_EQ(luns[3].logical_block_size, 4096u);
}

TEST(ScsiDiskOption, RejectsWhatWouldCollideOrNotFit) {
    const std::pair<std::vector<const char*>, const char*> cases[] = {
        {{"path=a,controller=c2"}, "controller=c2: no --scsi-controller has id=c2"},
        {{"path=a,controller="}, "controller=: must not be empty"},
        {{"path=a,controller=c0,lun=16384"}, "lun=16384: expected a number from 0 to 16383"},
        {{"path=a,controller=c0,lun=-1"}, "lun=-1: expected a number"},
        {{"path=a,controller=c0,lun=5", "path=b,controller=c0,lun=5"},
         "lun=5: controller c0 target 0 has LUN 5 already (path=a)"},
        {{"path=a,controller=c0,target=256"}, "target=256: expected a number from 0 to 255"},
        {{"path=a,controller=c1,target=2"},
         "target=2: controller c1 has targets 0 to 1 (its targets=2)"},
        {{"path=a,controller=c0,target=2,lun=1", "path=b,controller=c0,target=2,lun=1"},
         "controller c0 target 2 has LUN 1 already"},
        {{"path=a,controller=c0,physical-block-size=100000"}, "physical-block-size=100000"},
        {{"path=a,controller=c0", "path=b,controller=c0,lun=0"}, "has LUN 0 already"},
        {{"path=x/disk.img,controller=c0", "path=y/disk.img,controller=c1"},
         "serial disk.img is the serial of path=x/disk.img too"},
        {{"path=a,controller=c0,serial=S", "path=b,controller=c0,serial=S"},
         "serial S is the serial"},
        {{"path=a,controller=c0,serial="}, "serial=: must not be empty"},
        {{"path=a,controller=c0,serial=1234567890123456789012345678901234567"},
         "longer than 36 bytes"},
        {{"path=a,controller=c0,queues=2"}, "queues=2: a LUN has its controller's"},
        {{"path=a,controller=c0,queue-size=64"}, "queue-size=64: a LUN has its controller's"},
        {{"path=a,controller=c0,bus=root"}, "bus=root: a LUN has its controller's"},
        {{"path=a,controller=c0,aio=native"}, "aio=native: expected one of io_uring, threads"},
        {{"path=a,controller=c0,cache=off"}, "cache=off: expected one of writeback, none"},
        {{"controller=c0"}, "path= is required"},
    };
    for (const auto& [disks, message] : cases) {
        const auto& lines = disks;  // clang 14 cannot capture a structured binding
        const std::string error = error_of([&](std::string_view) { scsi_disks(lines); }, "");
        EXPECT_THAT(error, HasSubstr(message)) << disks.back();
        EXPECT_THAT(error, HasSubstr(std::string("--disk '") + disks.back() + "'"));
    }
}

TEST(RequestAllocOption, NamesWhereRequestsLive) {
    EXPECT_EQ(parse_request_alloc_option("pool"), SlotSource::pool);
    EXPECT_EQ(parse_request_alloc_option("malloc"), SlotSource::malloc);
    EXPECT_EQ(parse_request_alloc_option("mode=calloc"), SlotSource::calloc);
    EXPECT_THAT(error_of(parse_request_alloc_option, "slab"),
                HasSubstr("--request-alloc 'slab': slab: expected one of pool, malloc, calloc"));
    EXPECT_THAT(error_of(parse_request_alloc_option, ""),
                HasSubstr("expected pool, malloc or calloc"));
}

TEST(MemoryOption, BareSizeTakesDefaults) {
    const RamConfig config = parse_memory_option("512M");
    EXPECT_EQ(config, RamConfig{.size = 512 * MiB});
    EXPECT_EQ(parse_memory_option("size=512M"), config);
}

TEST(MemoryOption, EveryKey) {
    const RamConfig config = parse_memory_option(
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

TEST(MemoryOption, ValueSpellings) {
    EXPECT_EQ(parse_memory_option("1G,hugepages=2M").hugepages, HugePages::size_2m);
    EXPECT_EQ(parse_memory_option("1G,hugepages=2048K").hugepages, HugePages::size_2m);
    EXPECT_EQ(parse_memory_option("1G,hugepages=none").hugepages, HugePages::none);
    EXPECT_EQ(parse_memory_option("1G,hugepages=off").hugepages, HugePages::none);
    EXPECT_FALSE(parse_memory_option("1G,shared=off").shared);
    EXPECT_TRUE(parse_memory_option("1G,shared=yes").shared);
    EXPECT_EQ(parse_memory_option("1G,prealloc=on,prealloc-threads=auto").prealloc_threads, 0u);
    EXPECT_EQ(parse_memory_option("1G,prealloc=on,prealloc-method=populate").prealloc_method,
              PreallocMethod::populate);
}

TEST(MemoryOption, ErrorsNameTheBadItem) {
    struct Case {
        const char* option;
        const char* expected;
    };
    for (const Case& c : {
             Case{"", "needs a size"},
             Case{"1G,", "empty item"},
             Case{"1G,,shared=on", "empty item"},
             Case{"hugepages=2M", "needs a size"},
             Case{"size=", "size=: size '' is not a number"},
             Case{"size=12X", "size=12X: size '12X'"},
             Case{"size=0", "cannot be empty"},
             Case{"1G,2G", "'2G' is not key=value"},
             Case{"size=1G,size=2G", "size is given twice"},
             Case{"1G,size=2G", "size is given twice"},
             Case{"1G,memory=2G", "unknown key 'memory'"},
             Case{"1G,hugepages=3M", "hugepages=3M: expected none, 2M or 1G"},
             Case{"1G,hugepages=huge", "hugepages=huge: size 'huge'"},
             Case{"1G,shared=maybe", "shared=maybe: expected on or off"},
             Case{"1G,prealloc=on,prealloc-threads=x", "prealloc-threads=x: expected a number"},
             Case{"1G,prealloc=on,prealloc-threads=4x", "expected a number"},
             Case{"1G,prealloc=on,prealloc-threads=5000", "from 0 to 1024"},
             Case{"1G,prealloc=on,prealloc-method=memset", "expected one of touch, populate"},
             Case{"1G,prealloc-threads=4", "need prealloc=on"},
             Case{"1G,prealloc=off,prealloc-method=touch", "need prealloc=on"},
             Case{"1G,host-node=-1", "host-node=-1: expected a number"},
             Case{"1G,path=", "path=: must not be empty"},
             Case{"3M,hugepages=2M", "size 3 MiB is not a whole number of 2 MiB pages"},
             Case{"1536M,hugepages=1G", "1.5 GiB is not a whole number of 1 GiB pages"},
             Case{"5K", "5 KiB is not a whole number of 4 KiB pages"},
         }) {
        EXPECT_THAT(error_of(parse_memory_option, c.option), HasSubstr(c.expected)) << c.option;
        EXPECT_THAT(error_of(parse_memory_option, c.option), HasSubstr("--memory '")) << c.option;
    }
}

}  // namespace
}  // namespace mvmm
