#include "vmm/stop_signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <chrono>
#include <future>

#include "vmm/io_threads.h"

namespace mvmm {
namespace {

using namespace std::chrono_literals;

TEST(StopSignals, EachSignalReachesTheStopFunctionOnAnIoThread) {
    IoThreads io;
    StopSignals signals(io.context());
    io.start(2);
    std::promise<int> first;
    std::promise<int> second;
    int seen = 0;
    signals.on_signal([&](int signal) { (seen++ == 0 ? first : second).set_value(signal); });
    ::kill(::getpid(), SIGTERM);
    auto got = first.get_future();
    ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
    EXPECT_EQ(got.get(), SIGTERM);
    ::kill(::getpid(), SIGINT);
    got = second.get_future();
    ASSERT_EQ(got.wait_for(10s), std::future_status::ready);
    EXPECT_EQ(got.get(), SIGINT);
    io.stop();
}

// Before the machine runs there is nothing to shut down: mvmm exits at once, 128 + signal.
TEST(StopSignalsDeathTest, BeforeTheGuestRunsASignalExitsAtOnce) {
    EXPECT_EXIT(
        {
            spdlog::set_default_logger(spdlog::stderr_color_mt("stderr"));
            IoThreads io;
            StopSignals signals(io.context());
            io.start(1);
            ::kill(::getpid(), SIGINT);
            ::sleep(20);
            ::_exit(0);
        },
        ::testing::ExitedWithCode(128 + SIGINT), "stopped before the guest started");
}

}  // namespace
}  // namespace mvmm
