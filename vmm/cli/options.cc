#include "vmm/cli/options.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "devices/block/disk_image.h"
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

// format=raw|qcow2; without it the image's header decides.  cache=writeback|none.
devices::block::ImageOptions image_options(const OptionParser& parser) {
    using devices::block::CacheMode;
    using devices::block::ImageFormat;
    devices::block::ImageOptions options;
    options.format = parser.choice("format", {{"raw", ImageFormat::Raw}, {"qcow2", ImageFormat::Qcow2}},
                                   ImageFormat::Auto);
    options.cache = parser.choice("cache", {{"writeback", CacheMode::Writeback}, {"none", CacheMode::None}},
                                  CacheMode::Writeback);
    return options;
}

// aio=io_uring|threads|sync; unset: io_uring where the kernel has it (the device decides).
std::optional<devices::block::AioMode> aio_mode(const OptionParser& parser) {
    using devices::block::AioMode;
    if (!parser.has("aio")) return std::nullopt;
    return parser.choice("aio",
                         {{"io_uring", AioMode::IoUring},
                          {"threads", AioMode::Threads},
                          {"sync", AioMode::Sync}},
                         AioMode::IoUring);
}

// queues=N, else `default_queues` (one per vCPU, as QEMU does), at most `max`.
uint16_t queue_count(const OptionParser& parser, uint16_t max, uint16_t default_queues) {
    return static_cast<uint16_t>(
        parser.number("queues", 1, max).value_or(std::clamp<uint16_t>(default_queues, 1, max)));
}

blk::DiskConfig blk_disk(const OptionParser& parser, uint16_t default_queues) {
    if (parser.has("lun")) parser.fail("lun", "a LUN number needs controller=");
    blk::DiskConfig config;
    config.path = parser.required("path");
    config.image = image_options(parser);
    config.aio = aio_mode(parser);
    config.read_only = parser.toggle("readonly", false);
    config.serial = serial(parser, blk::kSerialBytes);
    config.queues = queue_count(parser, blk::kMaxQueues, default_queues);
    config.queue_size = queue_size(parser);
    config.bus = pci_bus(parser);
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

// lun=N, else the lowest number no LUN of `controller` has.
uint16_t lun_number(const OptionParser& parser, const ScsiControllerOption& controller) {
    const auto& luns = controller.controller.luns;
    const auto holder = [&](uint64_t number) {
        return std::ranges::find(luns, number, &scsi::LunConfig::lun);
    };
    const std::string& id = controller.controller.id;
    if (const auto number = parser.number("lun", 0, scsi::kMaxLun)) {
        if (const auto taken = holder(*number); taken != luns.end())
            parser.fail("lun", "controller " + id + " has LUN " + std::to_string(*number) +
                                   " already (path=" + taken->path + ")");
        return static_cast<uint16_t>(*number);
    }
    for (uint16_t number = 0; number <= scsi::kMaxLun; ++number)
        if (holder(number) == luns.end()) return number;
    parser.fail("controller", "controller " + id + " has no free LUN number");
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
    // A SCSI queue runs one command at a time (its task management relies on it), so neither
    // applies to a LUN yet.
    for (const char* key : {"aio", "cache"})
        if (parser.has(key)) parser.fail(key, "is for virtio-blk disks only, not a SCSI LUN");
    scsi::LunConfig lun;
    lun.path = parser.required("path");
    lun.image = image_options(parser);
    lun.read_only = parser.toggle("readonly", false);
    lun.serial =
        serial(parser, scsi::kMaxSerialBytes)
            .value_or(devices::block::serial_from_file_name(lun.path, scsi::kMaxSerialBytes));
    if (lun.serial.empty()) parser.fail("serial", "must not be empty (a LUN is named by it)");
    lun.lun = lun_number(parser, *controller);
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

ScsiControllerOption parse_scsi_controller_option(std::string_view text, uint16_t default_queues) {
    OptionParser parser("--scsi-controller", {"id", "queues", "queue-size", "bus"});
    parser.parse(text);
    ScsiControllerOption option;
    option.controller.id = parser.required("id");
    option.controller.request_queues = queue_count(parser, scsi::kMaxRequestQueues, default_queues);
    option.controller.queue_size = queue_size(parser);
    option.bus = pci_bus(parser);
    return option;
}

void add_disk_option(std::string_view text, DiskOptions& disks, uint16_t default_queues) {
    OptionParser parser("--disk", {"path", "format", "cache", "aio", "readonly", "serial", "queues",
                                   "queue-size", "bus", "controller", "lun"});
    parser.parse(text);
    if (parser.has("controller"))
        add_lun(parser, disks.scsi);
    else
        disks.blk.push_back(blk_disk(parser, default_queues));
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
