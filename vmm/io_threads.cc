#include "vmm/io_threads.h"

#include <spdlog/spdlog.h>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <system_error>

#include "base/thread_name.h"
#include "rcu/rcu.h"

namespace mvmm {

IoThreads::~IoThreads() {
    stop();
}

void IoThreads::start(unsigned count) {
    if (count < 1 || count > kMaxCount)
        throw std::invalid_argument("I/O threads: " + std::to_string(count) +
                                    " is not between 1 and " + std::to_string(kMaxCount));
    work_.emplace(boost::asio::make_work_guard(io_));
    threads_.reserve(count);
    try {
        for (unsigned i = 0; i < count; ++i)
            threads_.emplace_back([this, i] {
                name_this_thread("io" + std::to_string(i));
                serve();
            });
    } catch (const std::system_error& e) {
        // The running threads return only once the work guard is gone: stop before joining.
        const auto started = threads_.size();
        stop();
        throw std::runtime_error("cannot start I/O thread " + std::to_string(started + 1) + " of " +
                                 std::to_string(count) + ": " + e.what());
    }
}

void IoThreads::serve() {
    rcu::ThreadRegistration rcu_reader;
    for (;;) {
        try {
            io_.run();
            return;
        } catch (const std::exception& e) {
            // A handler threw: log it and keep serving the other devices.
            spdlog::error("I/O thread: {}", e.what());
        }
    }
}

void IoThreads::stop() {
    work_.reset();
    io_.stop();
    threads_.clear();  // joins
}

unsigned IoThreads::default_count(unsigned vcpus) {
    return default_count(std::thread::hardware_concurrency(), vcpus);
}

unsigned IoThreads::default_count(unsigned host_cpus, unsigned vcpus) {
    return std::clamp(host_cpus > vcpus ? host_cpus - vcpus : 0u, 1u, 4u);
}

}  // namespace mvmm
