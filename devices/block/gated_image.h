// Test support: an image whose reads wait at a gate the test opens, counting how many are
// inside at once, so a test sees how many requests reach the host side by side.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "devices/block/disk_image.h"

namespace mvmm::devices::block::testing {

class GatedImage final : public DiskImage {
  public:
    ~GatedImage() override {
        if (on_close) on_close();
    }
    std::function<void()> on_close;  // called as the image closes, on the thread that closes it

    const std::string& path() const noexcept override { return path_; }
    ImageFormat format() const noexcept override { return ImageFormat::Raw; }
    uint64_t size() const noexcept override { return 1 << 20; }
    uint64_t reread_size(uint64_t) override { return size(); }
    bool read_only() const noexcept override { return true; }
    IoResult read(uint64_t, const GuestBuffers&) const override {
        std::unique_lock lock(mutex_);
        ++inside_;
        changed_.notify_all();
        changed_.wait(lock, [&] { return open_; });
        return Ok{};
    }
    IoResult write(uint64_t, const GuestBuffers&) const override { return Ok{}; }
    IoResult flush() override { return Ok{}; }
    IoResult discard(uint64_t, uint64_t) const override { return Ok{}; }
    IoResult write_zeroes(uint64_t, uint64_t, bool) const override { return Ok{}; }

    bool wait_inside(int n) const {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, std::chrono::seconds(5), [&] { return inside_ >= n; });
    }
    void open_gate() {
        std::lock_guard lock(mutex_);
        open_ = true;
        changed_.notify_all();
    }

  private:
    std::string path_ = "gated";
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    mutable int inside_ = 0;
    bool open_ = false;
};

}  // namespace mvmm::devices::block::testing
