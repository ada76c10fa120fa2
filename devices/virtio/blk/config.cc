#include "devices/virtio/blk/config.h"

#include "devices/block/disk_image.h"

namespace mvmm::devices::virtio::blk {

std::string disk_serial(const DiskConfig& config) {
    return config.serial ? *config.serial : block::serial_from_file_name(config.path, kSerialBytes);
}

}  // namespace mvmm::devices::virtio::blk
