#include "mem/prealloc.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <vector>

#include "base/fd.h"
#include "base/mapping.h"
#include "mem/ram_test_util.h"

namespace mvmm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t MiB = 1ull << 20;
const uint64_t kPage = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));

TEST(SplitPages, EvenContiguousAndComplete) {
    std::vector<uint64_t> totals;
    for (uint64_t pages = 0; pages <= 300; ++pages) totals.push_back(pages);
    for (uint64_t pages : {1023ull, 4096ull, 262'143ull, 262'144ull, 1ull << 40, (1ull << 40) + 7})
        totals.push_back(pages);
    for (uint64_t total : totals) {
        for (unsigned threads = 1; threads <= 40; ++threads) {
            SCOPED_TRACE(testing::Message() << total << " pages, " << threads << " threads");
            const auto ranges = split_pages(total, threads);
            ASSERT_EQ(ranges.size(), threads);
            uint64_t next = 0;
            uint64_t smallest = UINT64_MAX, largest = 0;
            for (size_t i = 0; i < ranges.size(); ++i) {
                ASSERT_EQ(ranges[i].first, next) << "range " << i << " is not contiguous";
                next += ranges[i].count;
                smallest = std::min(smallest, ranges[i].count);
                largest = std::max(largest, ranges[i].count);
                // The remainder goes one page each to the first ranges, not all to the last.
                if (i > 0) {
                    ASSERT_LE(ranges[i].count, ranges[i - 1].count);
                }
            }
            ASSERT_EQ(next, total) << "pages lost or counted twice";
            ASSERT_LE(largest - smallest, 1u);
        }
    }
}

TEST(SplitPages, MoreThreadsThanPages) {
    EXPECT_EQ(split_pages(2, 4), (std::vector<PageRange>{{0, 1}, {1, 1}, {2, 0}, {2, 0}}));
    EXPECT_EQ(split_pages(0, 2), (std::vector<PageRange>{{0, 0}, {0, 0}}));
}

TEST(SplitPages, NoThreadsIsAnError) {
    EXPECT_THROW(split_pages(10, 0), std::invalid_argument);
}

TEST(DefaultPreallocThreads, BoundedByGuestHostAndSixteen) {
    const unsigned host = std::max(1u, default_prealloc_threads(1000));
    EXPECT_LE(host, 16u);
    EXPECT_EQ(default_prealloc_threads(1), 1u);
    EXPECT_EQ(default_prealloc_threads(0), 1u);
    EXPECT_EQ(default_prealloc_threads(2), std::min(host, 2u));
}

TEST(FormatProgress, PercentAndRate) {
    constexpr uint64_t GiB = 1ull << 30;
    EXPECT_EQ(format_progress({.done_bytes = 3 * GiB, .total_bytes = 8 * GiB, .seconds = 1.5}),
              "preallocating guest RAM: 37% (3.0 of 8.0 GiB, 2.0 GiB/s)");
    EXPECT_EQ(format_progress({.done_bytes = 0, .total_bytes = GiB, .seconds = 0}),
              "preallocating guest RAM: 0% (0.0 of 1.0 GiB, 0.0 GiB/s)");
}

std::string drain(int fd) {
    std::string out;
    char buffer[512];
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    while (::poll(&p, 1, 100) == 1) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n <= 0) break;
        out.append(buffer, static_cast<size_t>(n));
    }
    return out;
}

TEST(TerminalProgress, SilentWhenNotATerminal) {
    int ends[2];
    ASSERT_EQ(::pipe2(ends, O_NONBLOCK), 0);
    const Fd read_end(ends[0]), write_end(ends[1]);
    TerminalProgress progress(write_end.get());
    progress.update({.done_bytes = 1, .total_bytes = 2, .seconds = 5});
    progress.update({.done_bytes = 2, .total_bytes = 2, .seconds = 6, .finished = true});
    EXPECT_EQ(drain(read_end.get()), "");
}

TEST(TerminalProgress, RewritesOneLineOnATerminalAfterASecond) {
    const Fd master(::posix_openpt(O_RDWR | O_NOCTTY));
    ASSERT_TRUE(master.valid());
    ASSERT_EQ(::grantpt(master.get()), 0);
    ASSERT_EQ(::unlockpt(master.get()), 0);
    const Fd terminal(::open(::ptsname(master.get()), O_RDWR | O_NOCTTY));
    ASSERT_TRUE(terminal.valid());
    TerminalProgress progress(terminal.get());

    progress.update({.done_bytes = 1, .total_bytes = 4, .seconds = 0.5});
    EXPECT_EQ(drain(master.get()), "") << "a short preallocation needs no indicator";
    progress.update({.done_bytes = 2, .total_bytes = 4, .seconds = 1.2});
    const std::string line = drain(master.get());
    EXPECT_THAT(line, HasSubstr("\rpreallocating guest RAM: 50%"));
    EXPECT_EQ(line.find('\n'), std::string::npos);
    progress.update({.done_bytes = 4, .total_bytes = 4, .seconds = 2, .finished = true});
    EXPECT_THAT(drain(master.get()), HasSubstr("100%"));
}

class Recorder : public PreallocObserver {
  public:
    void update(const PreallocProgress& progress) override { seen.push_back(progress); }
    std::vector<PreallocProgress> seen;
};

class PreallocMethods : public testing::TestWithParam<PreallocMethod> {};

TEST_P(PreallocMethods, OneGibAnonymousBecomesResident) {
    constexpr uint64_t size = 1024 * MiB;
    const Mapping ram = Mapping::anonymous(size);
    ASSERT_EQ(resident_bytes(ram.bytes()), 0u);
    const uint64_t rss_before = process_rss();
    Recorder recorder;

    prealloc(std::vector{ram.bytes()}, {.page_size = kPage, .threads = 2, .method = GetParam()},
             &recorder);

    EXPECT_EQ(resident_bytes(ram.bytes()), size);
    EXPECT_GE(process_rss() - rss_before, size - 16 * MiB);
    ASSERT_FALSE(recorder.seen.empty());
    EXPECT_TRUE(recorder.seen.back().finished);
    EXPECT_EQ(recorder.seen.back().done_bytes, size);
    for (size_t i = 0; i < recorder.seen.size(); ++i) {
        EXPECT_EQ(recorder.seen[i].total_bytes, size);
        EXPECT_EQ(recorder.seen[i].finished, i + 1 == recorder.seen.size());
        if (i > 0) {
            EXPECT_GE(recorder.seen[i].done_bytes, recorder.seen[i - 1].done_bytes);
        }
    }
}

TEST_P(PreallocMethods, ThreadsSpanSeveralAreas) {
    // 3 threads over 7 + 1 + 5 pages: thread ranges straddle the area edges.
    const Mapping a = Mapping::anonymous(7 * kPage), b = Mapping::anonymous(kPage),
                  c = Mapping::anonymous(5 * kPage);
    prealloc(std::vector{a.bytes(), b.bytes(), c.bytes()},
             {.page_size = kPage, .threads = 3, .method = GetParam()});
    EXPECT_EQ(resident_bytes(a.bytes()), a.size());
    EXPECT_EQ(resident_bytes(b.bytes()), b.size());
    EXPECT_EQ(resident_bytes(c.bytes()), c.size());
}

TEST_P(PreallocMethods, MoreThreadsThanPages) {
    const Mapping ram = Mapping::anonymous(3 * kPage);
    prealloc(std::vector{ram.bytes()}, {.page_size = kPage, .threads = 8, .method = GetParam()});
    EXPECT_EQ(resident_bytes(ram.bytes()), ram.size());
}

TEST_P(PreallocMethods, KeepsNothingElseThanZeroes) {
    const Mapping ram = Mapping::anonymous(4 * MiB);
    prealloc(std::vector{ram.bytes()}, {.page_size = kPage, .threads = 2, .method = GetParam()});
    EXPECT_TRUE(std::all_of(ram.bytes().begin(), ram.bytes().end(), [](uint8_t b) { return !b; }));
}

INSTANTIATE_TEST_SUITE_P(, PreallocMethods,
                         testing::Values(PreallocMethod::touch, PreallocMethod::populate),
                         [](const auto& info) {
                             return info.param == PreallocMethod::touch ? "touch" : "populate";
                         });

TEST(Prealloc, RejectsAreasThatAreNotWholePages) {
    const Mapping ram = Mapping::anonymous(4 * kPage);
    const PreallocOptions options{.page_size = kPage, .threads = 1};
    EXPECT_THROW(prealloc(std::vector{ram.bytes().subspan(1, kPage)}, options),
                 std::invalid_argument);
    EXPECT_THROW(prealloc(std::vector{ram.bytes().first(kPage + 1)}, options),
                 std::invalid_argument);
    EXPECT_THROW(prealloc(std::vector{ram.bytes()}, {.page_size = 3000, .threads = 1}),
                 std::invalid_argument);
}

TEST(Prealloc, ReportsWhatTheKernelCannotBack) {
    // A read-only mapping cannot be faulted in for writing: populate says EFAULT, and a
    // touch would SIGSEGV, so only populate is tried here.
    void* p = ::mmap(nullptr, 4 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    const Mapping ram(p, 4 * kPage);
    try {
        prealloc(std::vector{ram.bytes()},
                 {.page_size = kPage, .threads = 2, .method = PreallocMethod::populate});
        FAIL() << "no error";
    } catch (const PreallocError& e) {
        EXPECT_NE(e.error(), 0);
        EXPECT_THAT(e.what(), HasSubstr("could not preallocate guest RAM"));
    }
}

}  // namespace
}  // namespace mvmm
