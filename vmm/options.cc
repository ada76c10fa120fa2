#include "vmm/options.h"

#include <algorithm>

#include "vmm/option_parser.h"

namespace mvmm {

namespace {

namespace blk = devices::virtio::blk;

bool printable_ascii(std::string_view text) {
    return std::ranges::all_of(text, [](char c) { return c >= 0x20 && c < 0x7f; });
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

blk::DiskConfig parse_disk_option(std::string_view text) {
    OptionParser parser("--disk", {"path", "readonly", "serial", "queues", "bus"});
    parser.parse(text);
    blk::DiskConfig config;
    config.path = parser.required("path");
    config.read_only = parser.toggle("readonly", false);
    if (auto serial = parser.get("serial")) {
        if (serial->size() > blk::kSerialBytes)
            parser.fail("serial", "longer than " + std::to_string(blk::kSerialBytes) + " bytes");
        if (!printable_ascii(*serial)) parser.fail("serial", "must be printable ASCII");
        config.serial = *serial;
    }
    config.queues = static_cast<uint16_t>(parser.number("queues", 1, blk::kMaxQueues).value_or(1));
    config.bus =
        parser.choice("bus", {{"rootport", blk::DiskBus::RootPort}, {"root", blk::DiskBus::Root}},
                      blk::DiskBus::RootPort);
    return config;
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

}  // namespace mvmm
