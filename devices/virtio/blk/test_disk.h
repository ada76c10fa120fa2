// Test support: a temporary disk image as a virtio-blk disk.
#pragma once

#include "devices/virtio/blk/config.h"
#include "devices/block/temp_image.h"

namespace mvmm::devices::virtio::blk::testing {

using block::testing::TempImage;

inline DiskConfig disk_config(const TempImage& image, bool read_only = false) {
    DiskConfig config;
    config.path = image.path();
    config.read_only = read_only;
    return config;
}

}  // namespace mvmm::devices::virtio::blk::testing
