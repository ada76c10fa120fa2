// The disks of the command line (virtio-blk disks and SCSI controllers with their LUNs),
// opened before /dev/kvm so that a missing or unusable image is a usage error (exit 2) on any
// host.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/block/disk_image.h"
#include "devices/virtio/blk/config.h"
#include "devices/virtio/queue_worker.h"
#include "devices/virtio/virtio_device.h"
#include "vmm/cli/options.h"

namespace mvmm::devices::virtio::blk {
class BlkDevice;
}
namespace mvmm::devices::virtio::scsi {
class ScsiController;
}

namespace mvmm {

// The management socket's resize-disk on one device: its disks opened from `path` read their
// image's size again and tell the guest when it changed.  Returns the new size in bytes, or
// nullopt when the device has no disk at `path`; throws std::runtime_error when the image no
// longer holds whole blocks.
using DiskResizer = std::function<std::optional<uint64_t>(const std::string& path)>;

// A virtio device that holds disks, where it goes on PCI, and what vCPU dumps call it.
struct Disk {
    devices::virtio::blk::DiskBus bus;
    std::unique_ptr<devices::virtio::Device> device;
    std::string id;    // "disk3", or the SCSI controller's id
    std::string name;  // "disk 3 (a.img)", "scsi c0 (60 LUNs at start)"
    const devices::virtio::QueueCounters* counters;  // the device's
    std::vector<devices::block::DiskImage*> images;  // the device's, for their caches
    DiskResizer resize;                              // the device's, valid as long as it is
    // A SCSI controller's LUNs come and go (vmm/disk_hotplug.h): they are reached through
    // it, not `images`.
    devices::virtio::scsi::ScsiController* scsi = nullptr;
};

// A virtio-blk disk's resizer: `blk` must outlive it.
DiskResizer blk_resizer(devices::virtio::blk::BlkDevice& blk, std::string path);

// The virtio-blk disks in order, then the SCSI controllers in order.  Throws UsageError naming
// the option that failed.
std::vector<Disk> open_disks(const DiskOptions& options, boost::asio::io_context& io);

}  // namespace mvmm
