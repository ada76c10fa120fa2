// The disks of the command line, opened before /dev/kvm so that a missing or unusable
// image is a usage error (exit 2) on any host.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <vector>

#include "devices/virtio/blk/config.h"
#include "devices/virtio/blk/device.h"

namespace mvmm {

struct Disk {
    devices::virtio::blk::DiskBus bus;
    std::unique_ptr<devices::virtio::blk::BlkDevice> device;
};

// Throws UsageError naming the --disk option that failed.
std::vector<Disk> open_disks(const std::vector<devices::virtio::blk::DiskConfig>& configs,
                             boost::asio::io_context& io);

}  // namespace mvmm
