// SIGINT and SIGTERM stop mvmm cleanly: once the guest runs, they end the machine the way the
// management socket's `quit` does (the vCPUs stop, the exit stats are logged, the disks are
// flushed and closed, the socket is removed) with exit code 128 + the signal.  Before that,
// nothing needs undoing and they end mvmm at once with the same code.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace boost::asio {
class io_context;
}

namespace mvmm {

// "SIGTERM", for log lines.
std::string signal_name(int signal);

class StopSignals {
  public:
    // Blocks SIGINT and SIGTERM in the calling thread, so that every thread started later
    // inherits the mask and the signals wait in a signalfd read on `io`: construct it before
    // any thread starts.  They stay blocked for good: a second signal during the shutdown the
    // first one started changes nothing.
    explicit StopSignals(boost::asio::io_context& io);
    // From then on a signal exits at once again.
    ~StopSignals();
    StopSignals(const StopSignals&) = delete;
    StopSignals& operator=(const StopSignals&) = delete;

    // From now on a signal calls `stop(signal)` on an I/O thread instead of exiting.
    void on_signal(std::function<void(int)> stop);

  private:
    class Watcher;

    std::shared_ptr<Watcher> watcher_;
};

}  // namespace mvmm
