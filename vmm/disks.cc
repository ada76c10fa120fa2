#include "vmm/disks.h"

#include <fmt/format.h>

#include <stdexcept>

#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/scsi/controller.h"
#include "vmm/cli/usage_error.h"

namespace mvmm {

DiskResizer blk_resizer(devices::virtio::blk::BlkDevice& blk, std::string path) {
    return [&blk, path = std::move(path)](const std::string& asked) {
        return asked == path ? std::optional(blk.resize_from_image()) : std::nullopt;
    };
}

std::vector<Disk> open_disks(const DiskOptions& options, boost::asio::io_context& io) {
    namespace virtio = devices::virtio;
    std::vector<Disk> disks;
    for (const auto& config : options.blk) {
        try {
            auto device = std::make_unique<virtio::blk::BlkDevice>(config, io);
            const auto* counters = &device->counters();
            auto* image = &device->image();
            DiskResizer resize = blk_resizer(*device, config.path);
            disks.push_back({config.bus,
                             std::move(device),
                             fmt::format("disk{}", disks.size()),
                             fmt::format("disk {} ({})", disks.size(), config.path),
                             counters,
                             {image},
                             std::move(resize)});
        } catch (const std::runtime_error& e) {
            throw UsageError("--disk path=" + config.path + ": " + e.what());
        }
    }
    for (const auto& [config, bus] : options.scsi) {
        try {
            auto device = std::make_unique<virtio::scsi::ScsiController>(config, io);
            const auto* counters = &device->counters();
            auto* scsi = device.get();
            // A read-only image may be several LUNs: each of them learns the new size.
            DiskResizer resize = [scsi](const std::string& asked) {
                std::optional<uint64_t> size;
                scsi->for_each_lun([&](uint8_t, uint16_t, virtio::scsi::Lun& lun) {
                    if (lun.image().path() == asked) size = lun.reread_capacity();
                });
                return size;
            };
            disks.push_back(
                {bus,
                 std::move(device),
                 config.id,
                 fmt::format("scsi {} ({} LUNs at start)", config.id, config.luns.size()),
                 counters,
                 {},
                 std::move(resize),
                 scsi});
        } catch (const std::runtime_error& e) {  // an image; the rest options.cc checked
            throw UsageError("--disk controller=" + config.id + ": " + e.what());
        }
    }
    return disks;
}

}  // namespace mvmm
