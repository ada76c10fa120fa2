#include "vmm/disks.h"

#include <fmt/format.h>

#include <stdexcept>

#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/scsi/controller.h"
#include "vmm/cli/usage_error.h"

namespace mvmm {

std::vector<Disk> open_disks(const DiskOptions& options, boost::asio::io_context& io) {
    namespace virtio = devices::virtio;
    std::vector<Disk> disks;
    for (const auto& config : options.blk) {
        try {
            auto device = std::make_unique<virtio::blk::BlkDevice>(config, io);
            const auto* counters = &device->counters();
            auto* image = &device->image();
            disks.push_back({config.bus, std::move(device),
                             fmt::format("disk {} ({})", disks.size(), config.path), counters,
                             {image}});
        } catch (const std::runtime_error& e) {
            throw UsageError("--disk path=" + config.path + ": " + e.what());
        }
    }
    for (const auto& [config, bus] : options.scsi) {
        try {
            auto device = std::make_unique<virtio::scsi::ScsiController>(config, io);
            const auto* counters = &device->counters();
            std::vector<devices::block::DiskImage*> images;
            for (const uint16_t lun : device->target().lun_numbers())
                images.push_back(&device->target().find(lun)->image());
            disks.push_back({bus, std::move(device),
                             fmt::format("scsi {} ({} LUNs)", config.id, config.luns.size()),
                             counters, std::move(images)});
        } catch (const std::runtime_error& e) {  // an image; the rest options.cc checked
            throw UsageError("--disk controller=" + config.id + ": " + e.what());
        }
    }
    return disks;
}

}  // namespace mvmm
