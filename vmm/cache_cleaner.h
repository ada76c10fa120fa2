// Drops the disk images' metadata-cache tables that nobody used for their cache-clean-interval
// (qcow2's L2 and refcount tables), as QEMU's cache-clean timer does: a timer on the I/O
// threads asks every image each period, and each image cleans once its own interval is over.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <vector>

#include "devices/block/disk_image.h"
#include "vmm/cli/options.h"

namespace mvmm {

// The shortest cache-clean-interval of the disks' images; 0 when none has one.
std::chrono::seconds cache_clean_period(const DiskOptions& disks);

class CacheCleaner {
  public:
    // Asks `images` every `period` from `io`'s threads (never when `period` is 0).  The images
    // and `io` must outlive the cleaner, and `io` must stop running before it goes.
    CacheCleaner(boost::asio::io_context& io, std::vector<devices::block::DiskImage*> images,
                 std::chrono::seconds period);
    CacheCleaner(const CacheCleaner&) = delete;
    CacheCleaner& operator=(const CacheCleaner&) = delete;

  private:
    void arm();

    boost::asio::steady_timer timer_;
    std::vector<devices::block::DiskImage*> images_;
    std::chrono::seconds period_;
};

}  // namespace mvmm
