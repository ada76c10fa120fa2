#include "vmm/cache_cleaner.h"

#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "vmm/io_threads.h"

namespace mvmm {
namespace {

using namespace std::chrono_literals;
namespace block = devices::block;

// Answers nothing but clean_idle, which it reports, and its interval.
class CountingImage final : public block::DiskImage {
  public:
    explicit CountingImage(std::chrono::seconds interval = 1s) : interval_(interval) {}
    const std::string& path() const noexcept override { return path_; }
    block::ImageFormat format() const noexcept override { return block::ImageFormat::Qcow2; }
    uint64_t size() const noexcept override { return 0; }
    uint64_t reread_size(uint64_t) override { return 0; }
    bool read_only() const noexcept override { return true; }
    block::IoResult read(uint64_t, const GuestBuffers&) const override { return Ok{}; }
    block::IoResult write(uint64_t, const GuestBuffers&) const override { return Ok{}; }
    block::IoResult flush() override { return Ok{}; }
    block::IoResult discard(uint64_t, uint64_t) const override { return Ok{}; }
    block::IoResult write_zeroes(uint64_t, uint64_t, bool) const override { return Ok{}; }
    size_t clean_idle(std::chrono::steady_clock::time_point) override {
        if (++calls == 2) second_call.set_value();
        return 0;
    }
    std::chrono::seconds cache_clean_interval() const noexcept override { return interval_; }

    int calls = 0;  // on one timer: never two at once
    std::promise<void> second_call;

  private:
    std::string path_ = "counting";
    std::chrono::seconds interval_;
};

// Visits the images it holds, as the machine's hot-plug registry does.
ImageVisitor visiting(std::vector<block::DiskImage*> images) {
    return [images = std::move(images)](const auto& clean) {
        for (auto* image : images) clean(*image);
    };
}

TEST(CacheCleaner, AsksEveryImageAgainAndAgain) {
    IoThreads io;
    CountingImage a, b;
    io.start(2);
    {
        CacheCleaner cleaner(io.context(), visiting({&a, &b}));  // their interval: 1 s
        EXPECT_EQ(a.second_call.get_future().wait_for(60s), std::future_status::ready);
        EXPECT_EQ(b.second_call.get_future().wait_for(60s), std::future_status::ready);
        io.stop();  // before the cleaner goes
    }
}

TEST(CacheCleaner, AnAddedIntervalStartsAnIdleCleanerOrShortensItsPeriod) {
    IoThreads io;
    CountingImage idle, slow;
    io.start(2);
    {
        CacheCleaner never(io.context(), visiting({&idle}), 0s);
        CacheCleaner hourly(io.context(), visiting({&slow}), 3600s);
        never.clean_at_least_every(0s);      // no interval: still idle
        never.clean_at_least_every(1s);      // a hot-added disk with cache-clean-interval=1
        hourly.clean_at_least_every(7200s);  // longer: changes nothing
        hourly.clean_at_least_every(1s);
        EXPECT_EQ(idle.second_call.get_future().wait_for(60s), std::future_status::ready);
        EXPECT_EQ(slow.second_call.get_future().wait_for(60s), std::future_status::ready);
        io.stop();
    }
}

TEST(CacheCleaner, ThePeriodIsTheShortestIntervalOfTheImages) {
    EXPECT_EQ(shortest_clean_interval(visiting({})), 0s) << "no disk";
    CountingImage raw(0s), slow(900s), faster(700s), fastest(30s);
    EXPECT_EQ(shortest_clean_interval(visiting({&raw})), 0s) << "nothing to clean";
    EXPECT_EQ(shortest_clean_interval(visiting({&raw, &slow, &faster})), 700s);
    EXPECT_EQ(shortest_clean_interval(visiting({&slow, &fastest, &raw})), 30s);
}

}  // namespace
}  // namespace mvmm
