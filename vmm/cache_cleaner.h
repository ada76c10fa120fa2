// Drops the disk images' metadata-cache tables that nobody used for their cache-clean-interval
// (qcow2's L2 and refcount tables), as QEMU's cache-clean timer does: a timer on the I/O
// threads asks every image each period, and each image cleans once its own interval is over.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <functional>

#include "devices/block/disk_image.h"

namespace mvmm {

// Calls its argument with every image present now (the set changes with hot-plug).
using ImageVisitor =
    std::function<void(const std::function<void(devices::block::DiskImage&)>& clean)>;

// The shortest cache-clean-interval of the images `visit` gives; 0 when none has one.
std::chrono::seconds shortest_clean_interval(const ImageVisitor& visit);

class CacheCleaner {
  public:
    // Asks the images `visit` gives every `period` from `io`'s threads (never while `period`
    // is 0; by default the shortest interval of the images there now).  `visit` and `io` must
    // outlive the cleaner, and `io` must stop running before it goes.
    CacheCleaner(boost::asio::io_context& io, ImageVisitor visit);
    CacheCleaner(boost::asio::io_context& io, ImageVisitor visit, std::chrono::seconds period);
    CacheCleaner(const CacheCleaner&) = delete;
    CacheCleaner& operator=(const CacheCleaner&) = delete;

    // An image with this cache-clean-interval was added: the period becomes `interval` when
    // that is shorter (or the cleaner was idle).  Any thread.
    void clean_at_least_every(std::chrono::seconds interval);

  private:
    void arm();

    boost::asio::strand<boost::asio::io_context::executor_type> strand_;  // timer_ and period_
    boost::asio::steady_timer timer_;
    ImageVisitor visit_;
    std::chrono::seconds period_;
};

}  // namespace mvmm
