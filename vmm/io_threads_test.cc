#include "vmm/io_threads.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <string>

namespace mvmm {
namespace {

TEST(IoThreads, RunHandlersOnEveryThreadUntilStopped) {
    IoThreads io;
    io.start(3);
    std::latch all_busy(3);
    std::atomic<int> ran{0};
    for (int i = 0; i < 3; ++i) {
        boost::asio::post(io.context(), [&] {
            all_busy.arrive_and_wait();  // needs three threads at once
            ++ran;
        });
    }
    all_busy.wait();
    io.stop();
    EXPECT_EQ(ran.load(), 3);
    io.stop();  // idempotent
}

// By default the threads take the host CPUs the vCPUs leave, one at least, four at most.
TEST(IoThreads, TheDefaultIsTheCpusNoVcpuRunsOn) {
    EXPECT_EQ(IoThreads::default_count(2, 2), 1u);
    EXPECT_EQ(IoThreads::default_count(1, 4), 1u);
    EXPECT_EQ(IoThreads::default_count(4, 1), 3u);
    EXPECT_EQ(IoThreads::default_count(64, 2), 4u);
}

TEST(IoThreads, CountsOutsideTheBoundsAreRefused) {
    IoThreads io;
    EXPECT_THROW(io.start(0), std::invalid_argument);
    EXPECT_THROW(io.start(IoThreads::kMaxCount + 1), std::invalid_argument);
}

#if !defined(MVMM_SANITIZER_RUNTIME)
uint64_t address_space_bytes() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
        if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) << 10;
    }
    return 0;
}

unsigned threads_of_this_process() {
    return static_cast<unsigned>(
        std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                      std::filesystem::directory_iterator()));
}

// In a child process: no address space left for more than a few 8 MiB thread stacks.
[[noreturn]] void start_threads_with_little_address_space() {
    const unsigned threads_before = threads_of_this_process();
    const rlim_t limit = address_space_bytes() + (48 << 20);
    const rlimit lim{limit, limit};
    ::setrlimit(RLIMIT_AS, &lim);
    IoThreads io;
    try {
        io.start(IoThreads::kMaxCount);
    } catch (const std::runtime_error& e) {
        if (!std::string(e.what()).starts_with("cannot start I/O thread")) _exit(4);
        _exit(threads_of_this_process() == threads_before ? 3 : 5);
    }
    _exit(0);
}

// A thread that cannot start is an error, and the threads started before it are stopped and
// joined by then (joining them while the work guard lives would hang).
TEST(IoThreadsDeathTest, AThreadThatCannotStartStopsTheOthers) {
    EXPECT_EXIT(start_threads_with_little_address_space(), ::testing::ExitedWithCode(3), "");
}
#endif

}  // namespace
}  // namespace mvmm
