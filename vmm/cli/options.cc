#include "vmm/cli/options.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "devices/block/disk_image.h"
#include "devices/virtio/block_size.h"
#include "vmm/cli/option_parser.h"

namespace mvmm {

namespace {

namespace virtio = devices::virtio;
namespace blk = devices::virtio::blk;
namespace scsi = devices::virtio::scsi;

bool printable_ascii(std::string_view text) {
    return std::ranges::all_of(text, [](char c) { return c >= 0x20 && c < 0x7f; });
}

std::optional<std::string> serial(const OptionParser& parser, size_t max_bytes) {
    const auto serial = parser.get("serial");
    if (!serial) return std::nullopt;
    if (serial->size() > max_bytes)
        parser.fail("serial", "longer than " + std::to_string(max_bytes) + " bytes");
    if (!printable_ascii(*serial)) parser.fail("serial", "must be printable ASCII");
    return std::string(*serial);
}

blk::DiskBus pci_bus(const OptionParser& parser) {
    return parser.choice("bus",
                         {{"rootport", blk::DiskBus::RootPort}, {"root", blk::DiskBus::Root}},
                         blk::DiskBus::RootPort);
}

// queue-size=N: every queue's maximum, which also bounds its request pool.
uint16_t queue_size(const OptionParser& parser) {
    return static_cast<uint16_t>(
        parser.power_of_two("queue-size", virtio::kMinQueueSize, virtio::kMaxQueueSize)
            .value_or(virtio::kDefaultQueueSize));
}

// logical-block-size= and physical-block-size=, checked as the devices check them.
virtio::BlockSizes block_sizes(const OptionParser& parser) {
    const auto logical = parser.number("logical-block-size", 512, 4096).value_or(512);
    const auto physical = parser.number("physical-block-size", 512, 65536).value_or(0);
    try {
        return virtio::checked_block_sizes(uint32_t(logical), uint32_t(physical));
    } catch (const std::invalid_argument& e) {
        parser.fail(e.what());
    }
}

// format=raw|qcow2 (without it the image's header decides) and qcow2's cache keys, with QEMU's
// names, defaults and units (a bare size is bytes).
devices::block::ImageOptions image_options(const OptionParser& parser) {
    using devices::block::ImageFormat;
    devices::block::ImageOptions options;
    options.format = parser.choice(
        "format", {{"raw", ImageFormat::Raw}, {"qcow2", ImageFormat::Qcow2}}, ImageFormat::Auto);
    auto& qcow2 = options.qcow2;
    qcow2.l2_cache_size =
        parser.size("l2-cache-size", SizeUnit::Bytes).value_or(qcow2.l2_cache_size);
    qcow2.refcount_cache_size =
        parser.size("refcount-cache-size", SizeUnit::Bytes).value_or(qcow2.refcount_cache_size);
    if (const auto seconds = parser.number("cache-clean-interval", 0, UINT32_MAX))
        qcow2.cache_clean_interval = std::chrono::seconds(*seconds);
    if (options.format == ImageFormat::Raw)
        for (const char* key : {"l2-cache-size", "refcount-cache-size", "cache-clean-interval"})
            if (parser.has(key)) parser.fail(key, "a qcow2 key; format=raw has no metadata caches");
    return options;
}

// cache=writeback|none: O_DIRECT for the image (and a qcow2 image's backing files); the queues
// (virtio-blk's, a SCSI LUN's) bounce the guest buffers it cannot take.
devices::block::CacheMode cache_mode(const OptionParser& parser) {
    using devices::block::CacheMode;
    return parser.choice("cache", {{"writeback", CacheMode::Writeback}, {"none", CacheMode::None}},
                         CacheMode::Writeback);
}

// aio=io_uring|threads|sync; unset: io_uring where the kernel has it (the device decides).
std::optional<devices::block::AioMode> aio_mode(const OptionParser& parser) {
    using devices::block::AioMode;
    if (!parser.has("aio")) return std::nullopt;
    return parser.choice(
        "aio",
        {{"io_uring", AioMode::IoUring}, {"threads", AioMode::Threads}, {"sync", AioMode::Sync}},
        AioMode::IoUring);
}

// queues=N, else `default_queues` within the device's limit.
uint16_t queue_count(const OptionParser& parser, unsigned default_queues, unsigned limit) {
    return static_cast<uint16_t>(
        parser.number("queues", 1, limit).value_or(std::clamp(default_queues, 1u, limit)));
}

blk::DiskConfig blk_disk(const OptionParser& parser, unsigned default_queues) {
    for (const char* key : {"lun", "target"})
        if (parser.has(key)) parser.fail(key, "a SCSI address needs controller=");
    blk::DiskConfig config;
    config.path = parser.required("path");
    config.image = image_options(parser);
    config.image.cache = cache_mode(parser);
    config.aio = aio_mode(parser);
    config.read_only = parser.toggle("readonly", false);
    config.serial = serial(parser, blk::kSerialBytes);
    config.queues = queue_count(parser, default_queues, blk::kMaxQueues);
    config.queue_size = queue_size(parser);
    config.bus = pci_bus(parser);
    const auto sizes = block_sizes(parser);
    config.logical_block_size = sizes.logical;
    config.physical_block_size = sizes.physical;
    return config;
}

// The LUN of any controller whose serial is `serial`.
const scsi::LunConfig* lun_with_serial(const std::vector<ScsiControllerOption>& controllers,
                                       std::string_view serial) {
    for (const auto& option : controllers)
        for (const auto& lun : option.controller.luns)
            if (lun.serial == serial) return &lun;
    return nullptr;
}

// lun=N, else the lowest number no LUN of `target` on `controller` has.
uint16_t lun_number(const OptionParser& parser, const ScsiControllerOption& controller,
                    uint8_t target) {
    const auto& luns = controller.controller.luns;
    const auto holder = [&](uint64_t number) {
        return std::ranges::find_if(luns, [&](const scsi::LunConfig& lun) {
            return lun.target == target && lun.lun == number;
        });
    };
    const std::string where =
        "controller " + controller.controller.id + " target " + std::to_string(target);
    if (const auto number = parser.number("lun", 0, scsi::kMaxLun)) {
        if (const auto taken = holder(*number); taken != luns.end())
            parser.fail("lun", where + " has LUN " + std::to_string(*number) +
                                   " already (path=" + taken->path + ")");
        return static_cast<uint16_t>(*number);
    }
    for (uint16_t number = 0; number <= scsi::kMaxLun; ++number)
        if (holder(number) == luns.end()) return number;
    parser.fail("controller", where + " has no free LUN number");
}

void add_lun(const OptionParser& parser, std::vector<ScsiControllerOption>& controllers) {
    const auto id = parser.required("controller");
    const auto controller =
        std::ranges::find_if(controllers, [&](const auto& c) { return c.controller.id == id; });
    if (controller == controllers.end())
        parser.fail("controller", "no --scsi-controller has id=" + std::string(id));
    for (const char* key : {"queues", "queue-size", "bus"})
        if (parser.has(key))
            parser.fail(key, "a LUN has its controller's; give it to --scsi-controller");
    scsi::LunConfig lun;
    lun.path = parser.required("path");
    lun.image = image_options(parser);
    lun.image.cache = cache_mode(parser);
    lun.aio = aio_mode(parser);
    lun.read_only = parser.toggle("readonly", false);
    lun.serial =
        serial(parser, scsi::kMaxSerialBytes)
            .value_or(devices::block::serial_from_file_name(lun.path, scsi::kMaxSerialBytes));
    if (lun.serial.empty()) parser.fail("serial", "must not be empty (a LUN is named by it)");
    lun.target = static_cast<uint8_t>(parser.number("target", 0, scsi::kMaxTarget).value_or(0));
    if (const auto targets = controller->controller.targets; targets > 0 && lun.target >= targets)
        parser.fail("target", "controller " + std::string(id) + " has targets 0 to " +
                                  std::to_string(targets - 1) +
                                  " (its targets=" + std::to_string(targets) + ")");
    lun.lun = lun_number(parser, *controller, lun.target);
    const auto sizes = block_sizes(parser);
    lun.logical_block_size = sizes.logical;
    lun.physical_block_size = sizes.physical;
    // /dev/disk/by-id names come from the serial: two LUNs with one would share them.
    if (const auto* twin = lun_with_serial(controllers, lun.serial))
        parser.fail("serial " + lun.serial + " is the serial of path=" + twin->path +
                    " too (LUNs need distinct serials: give serial=)");
    controller->controller.luns.push_back(std::move(lun));
}

HugePages hugepages(const OptionParser& parser) {
    const auto value = parser.get("hugepages");
    if (!value || *value == "none" || *value == "off") return HugePages::none;
    const auto size = parser.size("hugepages");
    if (size == page_size_of(HugePages::size_2m)) return HugePages::size_2m;
    if (size == page_size_of(HugePages::size_1g)) return HugePages::size_1g;
    parser.fail("hugepages", "expected none, 2M or 1G");
}

}  // namespace

ScsiControllerOption parse_scsi_controller_option(std::string_view text, unsigned default_queues) {
    OptionParser parser("--scsi-controller", {"id", "queues", "queue-size", "bus", "targets"});
    parser.parse(text);
    ScsiControllerOption option;
    option.controller.id = parser.required("id");
    option.controller.request_queues = queue_count(parser, default_queues, scsi::kMaxRequestQueues);
    option.controller.queue_size = queue_size(parser);
    option.controller.targets =
        static_cast<uint16_t>(parser.number("targets", 1, scsi::kMaxTarget + 1).value_or(0));
    option.bus = pci_bus(parser);
    return option;
}

void add_disk_option(std::string_view text, DiskOptions& disks, std::string flag) {
    OptionParser parser(
        std::move(flag),
        {"path", "format", "cache", "aio", "readonly", "serial", "queues", "queue-size", "bus",
         "controller", "target", "lun", "logical-block-size", "physical-block-size",
         "l2-cache-size", "refcount-cache-size", "cache-clean-interval"});
    parser.parse(text);
    if (parser.has("controller"))
        add_lun(parser, disks.scsi);
    else
        disks.blk.push_back(blk_disk(parser, disks.default_queues));
}

RamConfig parse_memory_option(std::string_view text) {
    OptionParser parser("--memory",
                        {"size", "hugepages", "shared", "path", "prealloc", "prealloc-threads",
                         "prealloc-method", "host-node"},
                        "size");
    parser.parse(text);
    RamConfig config;
    const auto size = parser.size("size");
    if (!size) parser.fail("needs a size, e.g. size=512M");
    if (*size == 0) parser.fail("size", "guest RAM cannot be empty");
    config.size = *size;
    config.hugepages = hugepages(parser);
    config.shared = parser.toggle("shared", false);
    if (parser.has("path")) config.path = parser.required("path");
    config.prealloc = parser.toggle("prealloc", false);
    if (parser.get("prealloc-threads") != "auto")
        config.prealloc_threads =
            static_cast<unsigned>(parser.number("prealloc-threads", 0, 1024).value_or(0));
    config.prealloc_method =
        parser.choice("prealloc-method",
                      {{"touch", PreallocMethod::touch}, {"populate", PreallocMethod::populate}},
                      PreallocMethod::populate);
    if (auto node = parser.number("host-node", 0, 1023)) config.host_node = unsigned(*node);

    if (!config.prealloc && (parser.has("prealloc-threads") || parser.has("prealloc-method")))
        parser.fail("prealloc-threads and prealloc-method need prealloc=on");
    const uint64_t page_size = page_size_of(config.hugepages);
    if (config.size % page_size != 0)
        parser.fail("size " + format_size(config.size) + " is not a whole number of " +
                    format_size(page_size) + " pages");
    return config;
}

devices::block::qcow2::CacheAlloc parse_cache_alloc_option(std::string_view text) {
    using devices::block::qcow2::CacheAlloc;
    OptionParser parser("--cache-alloc", {"mode"}, "mode");
    parser.parse(text);
    if (!parser.has("mode")) parser.fail("expected mapping or heap");
    return parser.choice("mode", {{"mapping", CacheAlloc::Mapping}, {"heap", CacheAlloc::Heap}},
                         CacheAlloc::Mapping);
}

SlotSource parse_request_alloc_option(std::string_view text) {
    OptionParser parser("--request-alloc", {"mode"}, "mode");
    parser.parse(text);
    if (!parser.has("mode")) parser.fail("expected pool, malloc or calloc");
    return parser.choice("mode",
                         {{"pool", SlotSource::pool},
                          {"malloc", SlotSource::malloc},
                          {"calloc", SlotSource::calloc}},
                         SlotSource::pool);
}

}  // namespace mvmm
