#include "vmm/cache_cleaner.h"

#include <algorithm>

namespace mvmm {

std::chrono::seconds cache_clean_period(const DiskOptions& disks) {
    std::chrono::seconds shortest{0};
    const auto consider = [&](const devices::block::ImageOptions& image) {
        const auto interval = image.qcow2.cache_clean_interval;
        if (interval.count() > 0 && (shortest.count() == 0 || interval < shortest))
            shortest = interval;
    };
    for (const auto& disk : disks.blk) consider(disk.image);
    for (const auto& scsi : disks.scsi)
        for (const auto& lun : scsi.controller.luns) consider(lun.image);
    return shortest;
}

CacheCleaner::CacheCleaner(boost::asio::io_context& io,
                           std::vector<devices::block::DiskImage*> images,
                           std::chrono::seconds period)
    : timer_(io), images_(std::move(images)), period_(period) {
    if (period_.count() > 0 && !images_.empty()) arm();
}

void CacheCleaner::arm() {
    timer_.expires_after(period_);
    timer_.async_wait([this](const boost::system::error_code& error) {
        if (error) return;  // cancelled: the cleaner is going
        const auto now = std::chrono::steady_clock::now();
        for (auto* image : images_) image->clean_idle(now);
        arm();
    });
}

}  // namespace mvmm
