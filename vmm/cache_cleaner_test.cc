#include "vmm/cache_cleaner.h"

#include <gtest/gtest.h>

#include <future>

#include "vmm/io_threads.h"

namespace mvmm {
namespace {

using namespace std::chrono_literals;
namespace block = devices::block;

// Answers nothing but clean_idle, which it reports.
class CountingImage final : public block::DiskImage {
  public:
    const std::string& path() const noexcept override { return path_; }
    block::ImageFormat format() const noexcept override { return block::ImageFormat::Qcow2; }
    uint64_t size() const noexcept override { return 0; }
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

    int calls = 0;  // on one timer: never two at once
    std::promise<void> second_call;

  private:
    std::string path_ = "counting";
};

TEST(CacheCleaner, AsksEveryImageAgainAndAgain) {
    IoThreads io;
    CountingImage a, b;
    io.start(2);
    {
        CacheCleaner cleaner(io.context(), {&a, &b}, 1s);
        EXPECT_EQ(a.second_call.get_future().wait_for(60s), std::future_status::ready);
        EXPECT_EQ(b.second_call.get_future().wait_for(60s), std::future_status::ready);
        io.stop();  // before the cleaner goes
    }
}

TEST(CacheCleaner, ThePeriodIsTheShortestIntervalGiven) {
    DiskOptions disks;
    EXPECT_EQ(cache_clean_period(disks), 0s) << "no disk";
    disks.blk.resize(3);
    disks.blk[0].image.qcow2.cache_clean_interval = 0s;  // never
    disks.blk[1].image.qcow2.cache_clean_interval = 900s;
    disks.blk[2].image.qcow2.cache_clean_interval = 700s;
    EXPECT_EQ(cache_clean_period(disks), 700s);
    disks.scsi.resize(1);
    disks.scsi[0].controller.luns.resize(1);
    disks.scsi[0].controller.luns[0].image.qcow2.cache_clean_interval = 30s;
    EXPECT_EQ(cache_clean_period(disks), 30s);
}

}  // namespace
}  // namespace mvmm
