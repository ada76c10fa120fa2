// The I/O threads: a Boost.Asio io_context run by a small pool of threads.  Device queues
// (virtio-blk) and the management socket do their work here, never on vCPU threads.
#pragma once

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <optional>
#include <thread>
#include <vector>

namespace mvmm {

class IoThreads {
  public:
    // More would only crowd the host: queues are served by strands, not a thread each.
    static constexpr unsigned kMaxCount = 64;

    // The context exists at once (devices bind to it); threads start with start().
    IoThreads() = default;
    ~IoThreads();  // stop()
    IoThreads(const IoThreads&) = delete;
    IoThreads& operator=(const IoThreads&) = delete;

    // Starts `count` threads (1..kMaxCount) running the context.  When one cannot start, the
    // ones already running are stopped and joined before the error is thrown.
    void start(unsigned count);
    // Stops the context and joins the threads; idempotent.
    void stop();

    boost::asio::io_context& context() noexcept { return io_; }

    // One per host CPU that no vCPU runs on, at least 1 and at most 4.  Every disk operation is
    // asynchronous (io_uring, the thread pool), so one thread never waits for a slow disk; more
    // threads than idle CPUs only preempt vCPUs: in a 2-CPU host with 2 vCPUs, one I/O thread
    // read 64 KiB sequential blocks 1.5x as fast as two (boot-bench --io, issue 26).
    static unsigned default_count(unsigned vcpus);
    static unsigned default_count(unsigned host_cpus, unsigned vcpus);

  private:
    void serve();

    boost::asio::io_context io_;
    std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
    std::vector<std::jthread> threads_;
};

// Stops the I/O threads when it goes out of scope.  Declare it after the objects their handlers
// use (the machine, the socket server), so that it runs before those go, on every path.
class IoThreadsStopper {
  public:
    explicit IoThreadsStopper(IoThreads& threads) : threads_(threads) {}
    ~IoThreadsStopper() { threads_.stop(); }
    IoThreadsStopper(const IoThreadsStopper&) = delete;
    IoThreadsStopper& operator=(const IoThreadsStopper&) = delete;

  private:
    IoThreads& threads_;
};

}  // namespace mvmm
