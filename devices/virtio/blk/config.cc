#include "devices/virtio/blk/config.h"

#include <algorithm>

namespace mvmm::devices::virtio::blk {
namespace {

bool printable_ascii(char c) {
    return c >= 0x20 && c < 0x7f;
}

}  // namespace

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
