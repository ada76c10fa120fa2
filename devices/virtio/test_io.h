// Test support for device tests with real I/O threads: a thread that runs the io_context as
// vmm's I/O threads do, a request handler whose "I/O" blocks until the test releases it, so a
// test can hold a request in flight while it resets the device, and one that holds many in
// flight and completes them later, as an asynchronous backend does; running an io_context on
// the test's thread until something happened, a virtio-blk write into a ring, and this
// process's open files.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iterator>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "devices/virtio/queue_worker.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::testing {

// Runs `io` on a thread of its own until destroyed.
class IoThread {
  public:
    explicit IoThread(boost::asio::io_context& io)
        : io_(io), work_(boost::asio::make_work_guard(io)), thread_([&io] { io.run(); }) {}
    ~IoThread() {
        work_.reset();
        io_.stop();
        thread_.join();
    }
    IoThread(const IoThread&) = delete;
    IoThread& operator=(const IoThread&) = delete;

  private:
    boost::asio::io_context& io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::thread thread_;
};

// Polls `done` every millisecond; false when it is still false after 5 s.
inline bool eventually(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// Runs `io` on this thread until `done` holds; false once `limit` passed.
inline bool run_io_until(boost::asio::io_context& io, const std::function<bool()>& done,
                         std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        if (io.stopped()) io.restart();
        io.run_one_for(std::chrono::milliseconds(10));
    }
    return true;
}

// A virtio-blk write of `data` at `sector` (header, data, status byte) published on `ring`;
// returns where the device writes the status.
inline GuestAddr add_blk_write(TestGuest& guest, TestDriver& ring, uint64_t sector,
                               std::span<const uint8_t> data) {
    constexpr uint32_t kBlkOut = 1;
    const GuestAddr header = guest.alloc(16);
    const uint32_t type[2] = {kBlkOut, 0};
    guest.write(header, std::span(reinterpret_cast<const uint8_t*>(type), 8));
    guest.write(header + 8, std::span(reinterpret_cast<const uint8_t*>(&sector), 8));
    const GuestAddr buffer = guest.alloc(data.size());
    guest.write(buffer, data);
    const GuestAddr status = guest.alloc(1);
    guest.write(status, std::vector<uint8_t>{0xff});
    const TestDriver::Buffer chain[] = {
        {header, 16, false}, {buffer, uint32_t(data.size()), false}, {status, 1, true}};
    ring.add_chain(chain);
    return status;
}

// File descriptors this process has open now.
inline size_t open_fd_count() {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                             std::filesystem::directory_iterator{}));
}

class GatedHandler : public RequestHandler {
  public:
    // Waits for release(); writes `done_byte` at the start of the writable part; returns its
    // size.
    uint32_t handle(const DescriptorChain& chain) override {
        std::unique_lock lock(mutex_);
        ++entered_;
        changed_.notify_all();
        changed_.wait(lock, [&] { return released_; });
        const uint8_t byte = done_byte;
        chain.writable.copy_from(0, std::span(&byte, 1));
        ++completed_;
        return static_cast<uint32_t>(chain.writable.size());
    }

    // True once `n` requests entered handle() (false after 5 s).
    bool wait_entered(int n) {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, std::chrono::seconds(5), [&] { return entered_ >= n; });
    }
    void release() {
        std::lock_guard lock(mutex_);
        released_ = true;
        changed_.notify_all();
    }
    int completed() {
        std::lock_guard lock(mutex_);
        return completed_;
    }

    static constexpr uint8_t done_byte = 0x5a;

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    int entered_ = 0;
    int completed_ = 0;
    bool released_ = false;
};

// Starts every request and holds it until the test releases it; released ones complete in the
// next progress(), which its eventfd wakes the worker for.  Each writes `done_byte` into its
// first writable byte.
class DeferredHandler : public AsyncRequestHandler {
  public:
    void start(InFlight& request) override {
        std::lock_guard lock(mutex_);
        held_.push_back(&request);
        changed_.notify_all();
    }
    void progress() override {
        std::vector<InFlight*> ready;
        {
            std::lock_guard lock(mutex_);
            ready.swap(released_);
        }
        for (InFlight* request : ready) {
            const uint8_t byte = done_byte;
            request->chain().writable.copy_from(0, std::span(&byte, 1));
            request->complete(static_cast<uint32_t>(request->chain().writable.size()));
        }
    }
    int completion_fd() const noexcept override { return ready_.get(); }

    // True once `n` requests are held at once (false after 5 s).
    bool wait_held(size_t n) {
        std::unique_lock lock(mutex_);
        return changed_.wait_for(lock, std::chrono::seconds(5), [&] { return held_.size() >= n; });
    }
    // Releases the held requests the newest first, or all.
    void release_newest(size_t n = SIZE_MAX) {
        std::lock_guard lock(mutex_);
        while (n-- > 0 && !held_.empty()) {
            released_.push_back(held_.back());
            held_.pop_back();
        }
        ready_.signal();
    }
    size_t held() {
        std::lock_guard lock(mutex_);
        return held_.size();
    }

    static constexpr uint8_t done_byte = 0x6b;

  private:
    EventFd ready_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::vector<InFlight*> held_, released_;
};

}  // namespace mvmm::devices::virtio::testing
