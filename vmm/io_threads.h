// The I/O threads: a Boost.Asio io_context run by a small pool of threads.  Device queues
// (virtio-blk), and later the management socket, do their work here, never on vCPU threads.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <thread>
#include <vector>

namespace mvmm {

class IoThreads {
  public:
    explicit IoThreads(unsigned count);
    ~IoThreads();  // stop()

    // Stops the context and joins the threads; idempotent.
    void stop();
    IoThreads(const IoThreads&) = delete;
    IoThreads& operator=(const IoThreads&) = delete;

    boost::asio::io_context& context() noexcept { return io_; }

    // One per host CPU, at most 4: enough that one slow flush does not stall every disk,
    // few enough not to crowd a small host (see devices/virtio/blk/README.md).
    static unsigned default_count();

  private:
    boost::asio::io_context io_;
    boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
    std::vector<std::jthread> threads_;
};

}  // namespace mvmm
