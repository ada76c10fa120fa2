// The disks of the command line (virtio-blk disks and SCSI controllers with their LUNs),
// opened before /dev/kvm so that a missing or unusable image is a usage error (exit 2) on any
// host.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>
#include <vector>

#include "devices/block/disk_image.h"
#include "devices/virtio/blk/config.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "vmm/cli/options.h"

namespace mvmm {

// A virtio device that holds disks, where it goes on PCI, and what vCPU dumps call it.
struct Disk {
    devices::virtio::blk::DiskBus bus;
    std::unique_ptr<devices::virtio::Device> device;
    std::string name;                                // "disk 3 (a.img)", "scsi c0 (60 LUNs)"
    const devices::virtio::QueueCounters* counters;  // the device's
    std::vector<devices::block::DiskImage*> images;   // the device's, for their caches
};

// The virtio-blk disks in order, then the SCSI controllers in order.  Throws UsageError naming
// the option that failed.
std::vector<Disk> open_disks(const DiskOptions& options, boost::asio::io_context& io);

}  // namespace mvmm
