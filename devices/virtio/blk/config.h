// What `--disk path=FILE[,readonly=on][,serial=S][,queues=N][,bus=rootport|root]` asks for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mvmm::devices::virtio::blk {

inline constexpr uint16_t kMaxQueues = 64;
inline constexpr size_t kSerialBytes = 20;  // VIRTIO_BLK_ID_BYTES

enum class DiskBus {
    RootPort,  // behind a PCIe root port of its own (the default)
    Root,      // directly on the root bus
};

struct DiskConfig {
    std::string path;
    bool read_only = false;
    std::optional<std::string> serial;  // unset: derived from the path (see disk_serial)
    uint16_t queues = 1;
    DiskBus bus = DiskBus::RootPort;
};

// Parses the option string; throws std::invalid_argument naming the bad key or value.
DiskConfig parse_disk_option(std::string_view option);

// The device ID string the guest sees (/dev/disk/by-id/virtio-<serial>): the configured
// serial, else the last 20 bytes of the image's file name.
std::string disk_serial(const DiskConfig& config);

}  // namespace mvmm::devices::virtio::blk
