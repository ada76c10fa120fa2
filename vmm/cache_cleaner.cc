#include "vmm/cache_cleaner.h"

#include <boost/asio/post.hpp>

namespace mvmm {

std::chrono::seconds shortest_clean_interval(const ImageVisitor& visit) {
    std::chrono::seconds shortest{0};
    visit([&](const devices::block::DiskImage& image) {
        const auto interval = image.cache_clean_interval();
        if (interval.count() > 0 && (shortest.count() == 0 || interval < shortest))
            shortest = interval;
    });
    return shortest;
}

CacheCleaner::CacheCleaner(boost::asio::io_context& io, ImageVisitor visit)
    : CacheCleaner(io, visit, shortest_clean_interval(visit)) {}

CacheCleaner::CacheCleaner(boost::asio::io_context& io, ImageVisitor visit,
                           std::chrono::seconds period)
    : strand_(boost::asio::make_strand(io)),
      timer_(strand_),
      visit_(std::move(visit)),
      period_(period) {
    if (period_.count() > 0) arm();
}

void CacheCleaner::clean_at_least_every(std::chrono::seconds interval) {
    if (interval.count() <= 0) return;
    boost::asio::post(strand_, [this, interval] {
        if (period_.count() > 0 && period_ <= interval) return;
        period_ = interval;
        arm();  // cancels the wait for the longer period
    });
}

void CacheCleaner::arm() {
    timer_.expires_after(period_);
    timer_.async_wait([this](const boost::system::error_code& error) {
        if (error) return;  // cancelled: the cleaner is going, or the period changed
        const auto now = std::chrono::steady_clock::now();
        visit_([now](devices::block::DiskImage& image) { image.clean_idle(now); });
        arm();
    });
}

}  // namespace mvmm
