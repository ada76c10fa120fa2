#include "vmm/io_threads.h"

#include <spdlog/spdlog.h>
#include <algorithm>

#include "rcu/rcu.h"

namespace mvmm {

IoThreads::IoThreads(unsigned count) : work_(boost::asio::make_work_guard(io_)) {
    for (unsigned i = 0; i < std::max(count, 1u); ++i) {
        threads_.emplace_back([this] {
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
        });
    }
}

IoThreads::~IoThreads() {
    stop();
}

void IoThreads::stop() {
    work_.reset();
    io_.stop();
    threads_.clear();  // joins
}

unsigned IoThreads::default_count() {
    return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

}  // namespace mvmm
