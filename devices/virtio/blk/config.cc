#include "devices/virtio/blk/config.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <stdexcept>

namespace mvmm::devices::virtio::blk {
namespace {

bool printable_ascii(char c) {
    return c >= 0x20 && c < 0x7f;
}

class OptionParser {
  public:
    explicit OptionParser(std::string_view option) : option_(option) {}

    [[noreturn]] void fail(const std::string& why) const {
        throw std::invalid_argument("--disk \"" + std::string(option_) + "\": " + why);
    }

    bool on_off(std::string_view key, std::string_view value) const {
        if (value == "on") return true;
        if (value == "off") return false;
        fail(std::string(key) + "=" + std::string(value) + " must be on or off");
    }

    uint16_t queues(std::string_view value) const {
        unsigned n = 0;
        auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (error != std::errc() || end != value.data() + value.size() || n < 1 || n > kMaxQueues)
            fail("queues=" + std::string(value) + " must be a number from 1 to " +
                 std::to_string(kMaxQueues));
        return static_cast<uint16_t>(n);
    }

    std::string serial(std::string_view value) const {
        if (value.size() > kSerialBytes)
            fail("serial=" + std::string(value) + " is longer than " +
                 std::to_string(kSerialBytes) + " bytes");
        if (!std::all_of(value.begin(), value.end(), printable_ascii))
            fail("serial=" + std::string(value) + " must be printable ASCII");
        return std::string(value);
    }

    DiskBus bus(std::string_view value) const {
        if (value == "rootport") return DiskBus::RootPort;
        if (value == "root") return DiskBus::Root;
        fail("bus=" + std::string(value) + " must be rootport or root");
    }

  private:
    std::string_view option_;
};

}  // namespace

DiskConfig parse_disk_option(std::string_view option) {
    const OptionParser parser(option);
    DiskConfig config;
    std::set<std::string_view> seen;
    if (option.empty()) parser.fail("path=FILE is required");
    size_t start = 0;
    while (start <= option.size()) {
        const size_t comma = std::min(option.find(',', start), option.size());
        const std::string_view item = option.substr(start, comma - start);
        start = comma + 1;
        if (item.empty()) parser.fail("empty item (a stray comma?)");
        const size_t equals = item.find('=');
        if (equals == std::string_view::npos)
            parser.fail("\"" + std::string(item) + "\" is not key=value");
        const std::string_view key = item.substr(0, equals);
        const std::string_view value = item.substr(equals + 1);
        if (!seen.insert(key).second) parser.fail(std::string(key) + " is given twice");

        if (key == "path") {
            if (value.empty()) parser.fail("path is empty");
            config.path = value;
        } else if (key == "readonly") {
            config.read_only = parser.on_off(key, value);
        } else if (key == "serial") {
            config.serial = parser.serial(value);
        } else if (key == "queues") {
            config.queues = parser.queues(value);
        } else if (key == "bus") {
            config.bus = parser.bus(value);
        } else {
            parser.fail("unknown key \"" + std::string(key) +
                        "\" (known: path, readonly, serial, queues, bus)");
        }
    }
    if (config.path.empty()) parser.fail("path=FILE is required");
    return config;
}

std::string disk_serial(const DiskConfig& config) {
    if (config.serial) return *config.serial;
    std::string_view name = config.path;
    if (auto slash = name.find_last_of('/'); slash != std::string_view::npos)
        name.remove_prefix(slash + 1);
    // The end of a name (disk-07.img) tells disks apart better than its start.
    if (name.size() > kSerialBytes) name.remove_prefix(name.size() - kSerialBytes);
    std::string serial(name);
    std::replace_if(
        serial.begin(), serial.end(), [](char c) { return !printable_ascii(c); }, '_');
    return serial;
}

}  // namespace mvmm::devices::virtio::blk
