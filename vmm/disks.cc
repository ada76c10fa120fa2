#include "vmm/disks.h"

#include "vmm/config.h"

namespace mvmm {

std::vector<Disk> open_disks(const std::vector<devices::virtio::blk::DiskConfig>& configs,
                             boost::asio::io_context& io) {
    std::vector<Disk> disks;
    for (const auto& config : configs) {
        try {
            disks.push_back(
                {config.bus, std::make_unique<devices::virtio::blk::BlkDevice>(config, io)});
        } catch (const std::runtime_error& e) {
            throw UsageError("--disk path=" + config.path + ": " + e.what());
        }
    }
    return disks;
}

}  // namespace mvmm
