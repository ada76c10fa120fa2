// The I/O queues of every aio= backend on real files: many operations in flight, each kind of
// operation, chains of them from io_done(), cache=none's bounce buffers, failures.
#include "devices/block/io_queue.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>

#include "base/fd.h"
#include "devices/block/faulty_image.h"
#include "devices/block/gated_image.h"
#include "devices/block/raw_image.h"
#include "devices/block/temp_image.h"
#include "devices/block/thread_pool.h"

namespace mvmm::devices::block {
namespace {

using testing::FaultyImage;
using testing::filled;
using testing::GatedImage;
using testing::pattern;
using testing::TempImage;

// An operation whose end the test records, and which may start another from io_done().
struct Recorded final : IoRequest {
    void io_done(IoResult result) override {
        ok = result.ok();
        if (!result) error = result.error();
        ++done;
        if (then) std::exchange(then, nullptr)();
    }
    bool ok = false;
    std::error_code error;
    int done = 0;
    std::function<void()> then;
};

// Serves `queue` as a queue worker does until `finished()` (false after 5 s).
bool serve_until(IoQueue& queue, const std::function<bool()>& finished) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!finished()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        if (const int fd = queue.completion_fd(); fd >= 0) {
            pollfd ready{fd, POLLIN, 0};
            uint64_t count;
            if (::poll(&ready, 1, 10) == 1 && ::read(fd, &count, sizeof count) < 0) return false;
        }
        queue.progress();
    }
    return true;
}

std::string mode_name(const ::testing::TestParamInfo<AioMode>& info) {
    return std::string(to_string(info.param));
}

class IoQueueTest : public ::testing::TestWithParam<AioMode> {
  protected:
    void SetUp() override {
        if (GetParam() == AioMode::IoUring && !io_uring_supported())
            GTEST_SKIP() << "this kernel refuses io_uring";
    }
    std::unique_ptr<IoQueue> open(DiskImage& image, uint32_t depth = 64) {
        return image.open_queue(GetParam(), depth);
    }
    bool run(IoQueue& queue, Recorded& request, const IoOp& op) {
        queue.submit(request, op);
        return serve_until(queue, [&] { return request.done == 1; });
    }

    TempImage file{1 << 20, 0xaa};
    std::unique_ptr<DiskImage> image = open_disk_image(file.path(), false);
};

TEST_P(IoQueueTest, KeepsManyReadsInFlightAndFillsEachOne) {
    auto queue = open(*image);
    const auto on_disk = pattern(1 << 20, 9);
    file.write(0, on_disk);
    constexpr int kReads = 64;
    std::deque<Recorded> reads(kReads);
    std::vector<std::vector<uint8_t>> into(kReads, std::vector<uint8_t>(4096));
    std::vector<GuestBuffers::Part> parts;
    for (auto& buffer : into) parts.emplace_back(std::span(buffer));
    for (int i = 0; i < kReads; ++i) {
        const uint64_t offset = uint64_t(i * 37 % 256) * 4096;
        queue->submit(reads[i], {.kind = IoOp::Kind::Read,
                                 .offset = offset,
                                 .buffers = GuestBuffers(std::span(&parts[i], 1))});
    }
    EXPECT_TRUE(std::ranges::all_of(reads, [](auto& r) { return r.done == 0; }))
        << "nothing completes in submit()";
    ASSERT_TRUE(serve_until(
        *queue, [&] { return std::ranges::all_of(reads, [](auto& r) { return r.done == 1; }); }));
    for (int i = 0; i < kReads; ++i) {
        ASSERT_TRUE(reads[i].ok) << i;
        const size_t offset = size_t(i * 37 % 256) * 4096;
        EXPECT_TRUE(std::equal(into[i].begin(), into[i].end(), on_disk.begin() + offset)) << i;
    }
}

TEST_P(IoQueueTest, WritesScatteredBuffersThenFlushesFromIoDone) {
    auto queue = open(*image);
    testing::ScatteredBuffers buffers;
    Recorded write, flush;
    write.then = [&] { queue->submit(flush, {.kind = IoOp::Kind::Flush}); };
    queue->submit(write,
                  {.kind = IoOp::Kind::Write, .offset = 4608, .buffers = buffers.scattered()});
    ASSERT_TRUE(serve_until(*queue, [&] { return flush.done == 1; }));
    EXPECT_TRUE(write.ok);
    EXPECT_TRUE(flush.ok);
    EXPECT_EQ(file.read(4608, 1024), buffers.gathered());
    EXPECT_EQ(file.read(4096, 512), filled(512, 0xaa)) << "nothing outside the range";
}

TEST_P(IoQueueTest, DiscardsAndWritesZeroes) {
    auto queue = open(*image);
    Recorded discard, zeroes, unmapped;
    ASSERT_TRUE(
        run(*queue, discard, {.kind = IoOp::Kind::Discard, .offset = 8192, .length = 8192}));
    EXPECT_TRUE(discard.ok);
    EXPECT_EQ(file.read(8192, 8192), filled(8192, 0));
    ASSERT_TRUE(
        run(*queue, zeroes, {.kind = IoOp::Kind::WriteZeroes, .offset = 1024, .length = 2048}));
    EXPECT_TRUE(zeroes.ok);
    EXPECT_EQ(file.read(1024, 2048), filled(2048, 0));
    ASSERT_TRUE(
        run(*queue, unmapped,
            {.kind = IoOp::Kind::WriteZeroes, .may_unmap = true, .offset = 65536, .length = 4096}));
    EXPECT_TRUE(unmapped.ok);
    EXPECT_EQ(file.read(65536, 4096), filled(4096, 0));
    EXPECT_EQ(file.read(512, 512), filled(512, 0xaa));
}

TEST_P(IoQueueTest, WritesZeroesWhereTheFilesystemCannotZero) {
    if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no /dev/shm";
    TempImage shm(256 * 1024, 0x55, "/dev/shm");  // tmpfs has no FALLOC_FL_ZERO_RANGE
    auto on_shm = open_disk_image(shm.path(), false);
    auto queue = open(*on_shm);
    Recorded zeroes;
    ASSERT_TRUE(run(*queue, zeroes,
                    {.kind = IoOp::Kind::WriteZeroes, .offset = 4096, .length = 200 * 1024}));
    EXPECT_TRUE(zeroes.ok);
    EXPECT_EQ(shm.read(4096, 200 * 1024), filled(200 * 1024, 0));
    EXPECT_EQ(shm.read(0, 4096), filled(4096, 0x55));
}

TEST_P(IoQueueTest, AReadPastAShrunkImageFails) {
    auto queue = open(*image);
    ASSERT_EQ(::truncate(file.path().c_str(), 4096), 0);
    std::vector<uint8_t> into(8192);
    const GuestBuffers::Part part[] = {GuestSlice(into)};
    Recorded read;
    ASSERT_TRUE(
        run(*queue, read, {.kind = IoOp::Kind::Read, .offset = 0, .buffers = GuestBuffers(part)}));
    EXPECT_FALSE(read.ok);
    EXPECT_EQ(read.error, std::errc::io_error);
}

// cache=none: buffers O_DIRECT cannot take go through the queue's bounce buffers, in windows.
TEST_P(IoQueueTest, BouncesUnalignedBuffersWithCacheNone) {
    image.reset();  // one writer at a time
    std::unique_ptr<DiskImage> direct;
    try {
        direct = open_disk_image(file.path(), false, {.cache = CacheMode::None, .qcow2 = {}});
    } catch (const ImageError& e) {
        if (std::string_view(e.what()).find("O_DIRECT") == std::string_view::npos) throw;
        GTEST_SKIP() << e.what();
    }
    ASSERT_GT(direct->buffer_alignment(), 1u);
    auto queue = open(*direct);
    constexpr size_t kBytes = 200 * 1024;  // more than one bounce window
    const auto data = pattern(kBytes, 5);
    std::vector<uint8_t> out(kBytes + 1), in(kBytes + 1);
    std::copy(data.begin(), data.end(), out.begin() + 1);  // one byte off any alignment
    const GuestBuffers::Part from[] = {GuestSlice(std::span(out).subspan(1))};
    const GuestBuffers::Part into[] = {GuestSlice(std::span(in).subspan(1))};
    Recorded write, read;
    ASSERT_TRUE(run(*queue, write,
                    {.kind = IoOp::Kind::Write, .offset = 512, .buffers = GuestBuffers(from)}));
    ASSERT_TRUE(write.ok) << write.error.message();
    EXPECT_EQ(file.read(512, kBytes), data);
    ASSERT_TRUE(run(*queue, read,
                    {.kind = IoOp::Kind::Read, .offset = 512, .buffers = GuestBuffers(into)}));
    ASSERT_TRUE(read.ok) << read.error.message();
    EXPECT_TRUE(std::equal(data.begin(), data.end(), in.begin() + 1));
    EXPECT_EQ(in[0], 0) << "nothing outside the buffers";
}

// Transfers submitted together whose ranges follow each other go to the host as one step, as
// QEMU merges them; each still gets its own bytes and its own completion.
TEST_P(IoQueueTest, MovesAdjacentTransfersAsOneStepAndEachGetsItsBytes) {
    auto queue = open(*image);
    constexpr int kOps = 40;  // more than one merged step holds
    constexpr size_t kBytes = 8192;
    auto data = pattern(kOps * kBytes, 3);
    std::deque<Recorded> writes(kOps), reads(kOps);
    std::vector<std::vector<uint8_t>> into(kOps, std::vector<uint8_t>(kBytes));
    std::vector<GuestBuffers::Part> from, to;
    for (int i = 0; i < kOps; ++i) {
        // Two pieces each: a run's parts are every piece of every operation.
        from.emplace_back(std::span(data).subspan(i * kBytes, 512));
        from.emplace_back(std::span(data).subspan(i * kBytes + 512, kBytes - 512));
        to.emplace_back(std::span(into[i]).first(kBytes - 512));
        to.emplace_back(std::span(into[i]).last(512));
    }
    for (int i = 0; i < kOps; ++i)
        queue->submit(writes[i], {.kind = IoOp::Kind::Write,
                                  .offset = 4096 + i * kBytes,
                                  .buffers = GuestBuffers(std::span(from).subspan(2 * i, 2))});
    ASSERT_TRUE(serve_until(
        *queue, [&] { return std::ranges::all_of(writes, [](auto& r) { return r.done == 1; }); }));
    EXPECT_TRUE(std::ranges::all_of(writes, [](auto& r) { return r.ok; }));
    EXPECT_EQ(file.read(4096, data.size()), data);
    EXPECT_EQ(file.read(0, 4096), filled(4096, 0xaa)) << "nothing outside the range";
    for (int i = 0; i < kOps; ++i)
        queue->submit(reads[i], {.kind = IoOp::Kind::Read,
                                 .offset = 4096 + i * kBytes,
                                 .buffers = GuestBuffers(std::span(to).subspan(2 * i, 2))});
    ASSERT_TRUE(serve_until(
        *queue, [&] { return std::ranges::all_of(reads, [](auto& r) { return r.done == 1; }); }));
    for (int i = 0; i < kOps; ++i) {
        ASSERT_TRUE(reads[i].ok) << i;
        EXPECT_TRUE(std::equal(into[i].begin(), into[i].end(), data.begin() + i * kBytes)) << i;
    }
}

// A merged read the host ends short of some of its operations (the image shrank): those
// before the end complete, the one cut goes on alone from where it stopped and those after
// are read alone; each past the end fails on its own.
TEST_P(IoQueueTest, AMergedReadCutShortEndsEachOperationOnItsOwn) {
    auto queue = open(*image);
    ASSERT_EQ(::truncate(file.path().c_str(), 6144), 0);
    std::vector<uint8_t> into(3 * 4096, 0x11);
    std::vector<GuestBuffers::Part> parts;
    for (int i = 0; i < 3; ++i) parts.emplace_back(std::span(into).subspan(i * 4096, 4096));
    std::deque<Recorded> reads(3);
    for (int i = 0; i < 3; ++i)
        queue->submit(reads[i], {.kind = IoOp::Kind::Read,
                                 .offset = uint64_t(i) * 4096,
                                 .buffers = GuestBuffers(std::span(&parts[i], 1))});
    ASSERT_TRUE(serve_until(
        *queue, [&] { return std::ranges::all_of(reads, [](auto& r) { return r.done == 1; }); }));
    EXPECT_TRUE(reads[0].ok);
    EXPECT_EQ(std::vector<uint8_t>(into.begin(), into.begin() + 4096), filled(4096, 0xaa));
    for (int i : {1, 2}) {
        EXPECT_FALSE(reads[i].ok) << i;
        EXPECT_EQ(reads[i].error, std::errc::io_error) << i;
    }
}

INSTANTIATE_TEST_SUITE_P(EveryBackend, IoQueueTest,
                         ::testing::Values(AioMode::IoUring, AioMode::Threads, AioMode::Sync),
                         mode_name);

// A step the host refuses to take (the image throws, as an io_uring with no room left does)
// ends its operation with EIO: at its first step (in submit()), or at a later one from
// progress() (the second window of a bounced write).  The queue goes on.
TEST(IoQueueFailureTest, AStepTheHostRefusesFailsItsOperation) {
    TempImage file(1 << 20, 0xaa);
    FaultyImage image(open_disk_image(file.path(), false), 4096);  // bounces, no O_DIRECT
    auto queue = image.open_queue(AioMode::Sync, 8);
    std::vector<uint8_t> out(200 * 1024 + 1, 7);
    const GuestBuffers::Part from[] = {GuestSlice(std::span(out).subspan(1))};
    const IoOp write{.kind = IoOp::Kind::Write, .offset = 0, .buffers = GuestBuffers(from)};
    for (const int refused : {1, 2}) {
        image.throw_at(refused);
        Recorded failed;
        queue->submit(failed, write);
        ASSERT_TRUE(serve_until(*queue, [&] { return failed.done == 1; })) << refused;
        EXPECT_FALSE(failed.ok) << refused;
        EXPECT_EQ(failed.error, std::errc::io_error) << refused;
    }
    Recorded flush;
    queue->submit(flush, {.kind = IoOp::Kind::Flush});
    ASSERT_TRUE(serve_until(*queue, [&] { return flush.done == 1; }));
    EXPECT_TRUE(flush.ok);
}

// The io_uring descriptors this process has open.
std::vector<int> io_uring_fds() {
    std::vector<int> found;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
        std::error_code error;
        if (std::filesystem::read_symlink(entry.path(), error) == "anon_inode:[io_uring]")
            found.push_back(std::stoi(entry.path().filename()));
    }
    return found;
}

// When the kernel stops taking from a queue's ring (here its descriptor is made to name
// /dev/null: io_uring_enter fails with EOPNOTSUPP), the steps left in the ring and every later
// one run on the thread pool: each operation ends with its bytes, and the queue can go.
TEST(IoQueueFailureTest, StepsARingNoLongerTakesRunOnThePool) {
    if (!io_uring_supported()) GTEST_SKIP() << "this kernel refuses io_uring";
    TempImage file(1 << 20, 0xaa);
    const auto on_disk = pattern(1 << 20, 3);
    file.write(0, on_disk);
    const auto image = open_disk_image(file.path(), false);
    const auto queue = image->open_queue(AioMode::IoUring, 8);
    const std::vector<int> rings = io_uring_fds();
    ASSERT_EQ(rings.size(), 1u);
    const Fd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
    ASSERT_EQ(::dup2(null.get(), rings[0]), rings[0]);

    constexpr int kReads = 4;  // apart, so that each is a step of its own
    std::deque<Recorded> reads(kReads);
    std::vector<std::vector<uint8_t>> into(kReads, std::vector<uint8_t>(4096));
    std::vector<GuestBuffers::Part> parts;
    for (auto& buffer : into) parts.emplace_back(std::span(buffer));
    for (int i = 0; i < kReads; ++i)
        queue->submit(reads[i], {.kind = IoOp::Kind::Read,
                                 .offset = uint64_t(i) * 65536,
                                 .buffers = GuestBuffers(std::span(&parts[i], 1))});
    ASSERT_TRUE(serve_until(
        *queue, [&] { return std::ranges::all_of(reads, [](auto& r) { return r.done == 1; }); }));
    for (int i = 0; i < kReads; ++i) {
        ASSERT_TRUE(reads[i].ok) << i << ": " << reads[i].error.message();
        EXPECT_TRUE(std::equal(into[i].begin(), into[i].end(), on_disk.begin() + i * 65536)) << i;
    }

    auto out = pattern(4096, 77);
    const GuestBuffers::Part from[] = {GuestSlice(std::span(out))};
    Recorded write, flush;
    write.then = [&] { queue->submit(flush, {.kind = IoOp::Kind::Flush}); };
    queue->submit(write,
                  {.kind = IoOp::Kind::Write, .offset = 8192, .buffers = GuestBuffers(from)});
    ASSERT_TRUE(serve_until(*queue, [&] { return flush.done == 1; }));
    EXPECT_TRUE(write.ok && flush.ok);
    EXPECT_EQ(file.read(8192, 4096), out);
}

// The host sees a run of adjacent transfers as one call, at most 32 operations each, and
// transfers that do not continue each other as a call each; after a merged step that failed
// (here: the host refused it) each operation goes on alone, so only its own error is its.
TEST(IoQueueMergeTest, OneHostCallPerRunOfAdjacentTransfers) {
    TempImage file(1 << 20, 0xaa);
    FaultyImage image(open_disk_image(file.path(), false));
    auto queue = image.open_queue(AioMode::Sync, 64);
    std::vector<uint8_t> into(64 * 4096);
    std::vector<GuestBuffers::Part> parts;
    for (int i = 0; i < 64; ++i) parts.emplace_back(std::span(into).subspan(i * 4096, 4096));
    const auto read_all = [&](int count, uint64_t stride) {
        std::deque<Recorded> reads(count);
        for (int i = 0; i < count; ++i)
            queue->submit(reads[i], {.kind = IoOp::Kind::Read,
                                     .offset = i * stride,
                                     .buffers = GuestBuffers(std::span(&parts[i], 1))});
        EXPECT_TRUE(serve_until(*queue, [&] {
            return std::ranges::all_of(reads, [](auto& r) { return r.done == 1; });
        }));
        return std::ranges::count_if(reads, [](auto& r) { return r.ok; });
    };
    image.throw_at(0);
    EXPECT_EQ(read_all(40, 4096), 40);
    EXPECT_EQ(image.calls(), 2) << "32 operations, then 8";
    image.throw_at(0);
    EXPECT_EQ(read_all(8, 8192), 8);
    EXPECT_EQ(image.calls(), 8) << "a gap between each";
    image.throw_at(1);
    EXPECT_EQ(read_all(4, 4096), 4);
    EXPECT_EQ(image.calls(), 5) << "the refused step, then each read alone";
}

// aio=threads is how an image without io_uring (qcow2) gets depth: its blocking calls run
// side by side on the pool, which grows while work waits.
TEST(ThreadPoolQueueTest, RunsAnImagesBlockingCallsSideBySide) {
    GatedImage gated;
    auto queue = gated.open_queue(AioMode::IoUring, 32);  // not raw: the thread pool
    std::vector<uint8_t> into(512);
    const GuestBuffers::Part part[] = {GuestSlice(into)};
    std::deque<Recorded> reads(16);
    for (auto& read : reads)
        queue->submit(read, {.kind = IoOp::Kind::Read, .buffers = GuestBuffers(part)});
    queue->progress();  // hands them to the pool
    EXPECT_TRUE(gated.wait_inside(16)) << "16 reads blocked at once";
    gated.open_gate();
    ASSERT_TRUE(serve_until(
        *queue, [&] { return std::ranges::all_of(reads, [](auto& r) { return r.done == 1; }); }));
    EXPECT_TRUE(std::ranges::all_of(reads, [](auto& r) { return r.ok; }));
    EXPECT_GE(ThreadPool::shared()->threads(), 16u);
}

}  // namespace
}  // namespace mvmm::devices::block
