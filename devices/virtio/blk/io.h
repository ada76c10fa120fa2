// The execution of checked virtio-blk requests on a disk image.  Every call blocks: they run on
// I/O threads, never on a vCPU thread.
#pragma once

#include <string_view>

#include "devices/virtio/blk/request.h"
#include "devices/block/disk_image.h"

namespace mvmm::devices::virtio::blk {

// Carries out `request` on `disk`.  `id` answers get-id (NUL-padded to 20 bytes).  With
// `write_through` (the driver did not negotiate VIRTIO_BLK_F_FLUSH) every write is flushed
// before it completes, as the spec then requires.
block::IoResult execute(const Request& request, block::DiskImage& disk, std::string_view id, bool write_through);

}  // namespace mvmm::devices::virtio::blk
