#include "vmm/stop_signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

namespace mvmm {

namespace {

sigset_t stop_signal_set() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    return set;
}

}  // namespace

std::string signal_name(int signal) {
    const char* abbrev = ::sigabbrev_np(signal);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(signal);
}

// Shared with its pending wait, which may outlive the StopSignals in a stopped io_context.
class StopSignals::Watcher : public std::enable_shared_from_this<Watcher> {
  public:
    Watcher(boost::asio::io_context& io, int fd) : descriptor_(io, fd) {}

    void wait() {
        descriptor_.async_wait(boost::asio::posix::descriptor_base::wait_read,
                               [self = shared_from_this()](boost::system::error_code error) {
                                   if (!error) self->deliver();
                               });
    }

    void set_stop(std::function<void(int)> stop) {
        std::lock_guard lock(mutex_);
        stop_ = std::move(stop);
    }

  private:
    void deliver() {
        signalfd_siginfo info;
        while (::read(descriptor_.native_handle(), &info, sizeof info) == sizeof info) {
            const int signal = static_cast<int>(info.ssi_signo);
            // Held while exiting too, so that on_signal() cannot hand over half-way.
            std::lock_guard lock(mutex_);
            if (!stop_) {
                spdlog::info("{}: stopped before the guest started", signal_name(signal));
                std::_Exit(128 + signal);
            }
            stop_(signal);
        }
        wait();
    }

    boost::asio::posix::stream_descriptor descriptor_;
    std::mutex mutex_;
    std::function<void(int)> stop_;
};

StopSignals::StopSignals(boost::asio::io_context& io) {
    const sigset_t set = stop_signal_set();
    if (const int error = ::pthread_sigmask(SIG_BLOCK, &set, nullptr))
        throw std::system_error(error, std::generic_category(), "pthread_sigmask");
    const int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "signalfd");
    watcher_ = std::make_shared<Watcher>(io, fd);
    watcher_->wait();
}

StopSignals::~StopSignals() {
    watcher_->set_stop(nullptr);
}

void StopSignals::on_signal(std::function<void(int)> stop) {
    watcher_->set_stop(std::move(stop));
}

}  // namespace mvmm
