// Crash consistency: a child process writes, discards and zeroes through the engine from two
// threads and is killed with SIGKILL at a random moment, again and again on the same image.
// After every kill `qemu-img check` must find no corruption (leaked clusters are allowed),
// every request that a completed flush covered must read back (through qemu-img, not the
// engine), every part of the disk the child did not touch must be as it was, and what it
// touched without a flush may hold old or new data, never another's.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <map>
#include <random>
#include <thread>

#include "devices/block/qcow2/qcow2_image.h"
#include "devices/block/qcow2/test_support.h"

namespace mvmm::devices::block::qcow2 {
namespace {

using namespace testing;

constexpr uint64_t kDiskSize = 16 << 20;
constexpr uint64_t kSlot = 64 << 10;  // each thread owns every other slot
constexpr uint32_t kThreads = 2;
// Each kill costs a qemu-img check and convert plus a full read: fewer under the sanitizers,
// whose builds run every unit test again (the plain build keeps the 30).
#if defined(MVMM_SANITIZER_RUNTIME)
constexpr int kKills = 10;
#else
constexpr int kKills = 30;
#endif

enum class Op : uint32_t { Write, Discard, WriteZeroes };

// What the child tells the parent, one record per pipe write (atomic: below PIPE_BUF).
struct Record {
    uint32_t flushed;  // 0: about to run the request below; 1: flushed up to `seq`
    uint32_t thread;
    uint64_t seq;
    Op op;
    uint64_t offset;
    uint64_t length;
    uint64_t seed;
};

struct Variant {
    const char* compat;
    uint64_t cluster_size;
};

class CrashTest : public ::testing::TestWithParam<Variant> {
  protected:
    void SetUp() override {
        SKIP_WITHOUT_QEMU_IMG();
        model_ = pattern(kDiskSize, 99);
        write_file_bytes(base_, 0, model_);
        must("qemu-img create -q -f qcow2 -o compat=" + std::string(GetParam().compat) +
             ",cluster_size=" + std::to_string(GetParam().cluster_size) +
             ",backing_file=base.raw,backing_fmt=raw " + path_ + " " + std::to_string(kDiskSize));
    }

    // The bytes a request leaves in [offset, offset + length).
    std::vector<uint8_t> result_of(const Record& r) const {
        if (r.op == Op::Write) return pattern(r.length, r.seed, r.offset);
        if (r.op == Op::Discard && GetParam().compat[0] == '0')  // v2: the backing file shows
            return std::vector(model_base_.begin() + r.offset,
                               model_base_.begin() + r.offset + r.length);
        return std::vector<uint8_t>(r.length, 0);
    }

    [[noreturn]] void run_child(int pipe_fd, uint64_t round);
    void kill_child_at_random(int pipe_fd, pid_t child, std::mt19937_64& random,
                              std::vector<Record>& records);
    void check_no_foreign_data(const std::vector<uint8_t>& disk, uint64_t slot,
                               const std::vector<Record>& requests, uint64_t round) const;
    void check_after_kill(const std::vector<Record>& records, uint64_t round);

    ScratchDir dir_;
    std::string base_ = dir_.file("base.raw");
    std::string path_ = dir_.file("top.qcow2");
    std::vector<uint8_t> model_;  // what the disk holds as far as the parent knows
    std::vector<uint8_t> model_base_ = pattern(kDiskSize, 99);
};

// Requests from each thread on its own slots: a few, then a flush, then the report.
void CrashTest::run_child(int pipe_fd, uint64_t round) {
    const uint64_t cluster = GetParam().cluster_size;
    // Small caches: tables leave them, and are written, in the middle of the run.
    const auto image = Qcow2Image::open(path_, false, {.l2_cache_size = 2 * cluster});
    auto report = [&](const Record& r) {
        if (::write(pipe_fd, &r, sizeof r) != sizeof r) _exit(3);
    };
    std::vector<std::thread> threads;
    for (uint32_t t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 random(round * 1000 + t);
            for (uint64_t seq = 1; seq < 100000; ++seq) {
                Record r{0, t, seq, Op::Write, 0, 0, round * 1000000 + seq * kThreads + t};
                const uint64_t slot = (random() % (kDiskSize / kSlot / kThreads)) * kThreads + t;
                const uint64_t kind = random() % 10;
                r.op = kind < 8 ? Op::Write : kind == 8 ? Op::Discard : Op::WriteZeroes;
                const uint64_t unit = r.op == Op::Discard ? cluster : 512;
                const uint64_t units = kSlot / unit;
                const uint64_t first = random() % units;
                r.offset = slot * kSlot + first * unit;
                r.length = (1 + random() % (units - first)) * unit;
                report(r);
                IoResult done = r.op == Op::Write ? write_bytes(*image, r.offset, result_of(r))
                                : r.op == Op::Discard
                                    ? image->discard(r.offset, r.length)
                                    : image->write_zeroes(r.offset, r.length, random() % 2);
                if (!done) _exit(4);
                if (random() % 4 == 0) {
                    if (!image->flush()) _exit(5);
                    report(Record{1, t, seq, Op::Write, 0, 0, 0});
                }
            }
        });
    }
    for (auto& thread : threads) thread.join();
    _exit(0);
}

// Lets the child report a random number of flushes, waits a random moment more, kills it and
// collects everything it reported.
void CrashTest::kill_child_at_random(int pipe_fd, pid_t child, std::mt19937_64& random,
                                     std::vector<Record>& records) {
    const int flushes = 1 + static_cast<int>(random() % 8);
    for (int seen = 0; seen < flushes;) {
        Record r;
        ASSERT_EQ(::read(pipe_fd, &r, sizeof r), ssize_t(sizeof r)) << "the child died early";
        records.push_back(r);
        seen += r.flushed;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(random() % 3000));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
    for (Record r; ::read(pipe_fd, &r, sizeof r) == ssize_t(sizeof r);) records.push_back(r);
}

// A slot whose last requests were not flushed may hold any mix of before and after, sector by
// sector, but nothing else: no data of another slot or another time.
void CrashTest::check_no_foreign_data(const std::vector<uint8_t>& disk, uint64_t slot,
                                      const std::vector<Record>& requests, uint64_t round) const {
    for (uint64_t sector = slot * kSlot; sector < (slot + 1) * kSlot; sector += 512) {
        auto holds = [&](const uint8_t* bytes) {
            return std::equal(bytes, bytes + 512, disk.begin() + sector);
        };
        bool known = holds(&model_[sector]);
        for (const Record& r : requests) {
            if (known || sector < r.offset || sector >= r.offset + r.length) continue;
            known = holds(&result_of(r)[sector - r.offset]);
        }
        ASSERT_TRUE(known) << "round " << round << ": sector " << sector / 512
                           << " holds data no request of its slot wrote";
    }
}

void CrashTest::check_after_kill(const std::vector<Record>& records, uint64_t round) {
    const RunResult check = qemu_img_check(path_);
    ASSERT_TRUE(check.status == 0 || check.status == 3)
        << "round " << round << ": qemu-img check says\n"
        << check.output;
    must("qemu-img convert -O raw " + path_ + " " + path_ + ".raw");
    const std::vector<uint8_t> disk = file_bytes(path_ + ".raw");
    ASSERT_EQ(disk.size(), kDiskSize);

    // Per slot: the requests a flush covered, and whether any was left uncertain.
    std::map<uint32_t, uint64_t> flushed_up_to;
    for (const Record& r : records)
        if (r.flushed) flushed_up_to[r.thread] = r.seq;
    std::map<uint64_t, std::vector<Record>> durable, touched;
    std::map<uint64_t, bool> uncertain;
    for (const Record& r : records) {
        if (r.flushed) continue;
        const uint64_t slot = r.offset / kSlot;
        touched[slot].push_back(r);
        if (r.seq <= flushed_up_to[r.thread]) {
            durable[slot].push_back(r);
        } else {
            uncertain[slot] = true;
        }
    }
    for (uint64_t slot = 0; slot < kDiskSize / kSlot; ++slot) {
        if (uncertain[slot]) {
            check_no_foreign_data(disk, slot, touched[slot], round);
            continue;
        }
        std::vector<uint8_t> want(model_.begin() + slot * kSlot,
                                  model_.begin() + (slot + 1) * kSlot);
        for (const Record& r : durable[slot]) {
            const auto bytes = result_of(r);
            std::copy(bytes.begin(), bytes.end(), want.begin() + (r.offset - slot * kSlot));
        }
        ASSERT_TRUE(std::equal(want.begin(), want.end(), disk.begin() + slot * kSlot))
            << "round " << round << ": slot " << slot << " lost a flushed request or was touched";
    }
    EXPECT_TRUE(read_bytes(*Qcow2Image::open(path_, true), 0, kDiskSize) == disk)
        << "round " << round << ": the engine reads what qemu-img reads";
    model_ = disk;
}

TEST_P(CrashTest, KillsLeaveNoCorruptionAndKeepFlushedRequests) {
    std::mt19937_64 random(GetParam().cluster_size);
    for (int round = 1; round <= kKills; ++round) {
        int fds[2];
        ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
        const pid_t child = ::fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            ::close(fds[0]);
            run_child(fds[1], round);
        }
        ::close(fds[1]);
        std::vector<Record> records;
        kill_child_at_random(fds[0], child, random, records);
        ::close(fds[0]);
        if (HasFatalFailure()) return;
        check_after_kill(records, round);
        if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(Variants, CrashTest,
                         ::testing::Values(Variant{"1.1", 512}, Variant{"1.1", 65536},
                                           Variant{"0.10", 4096}),
                         [](const auto& info) {
                             return std::string(info.param.compat[0] == '0' ? "v2_" : "v3_") +
                                    std::to_string(info.param.cluster_size);
                         });

}  // namespace
}  // namespace mvmm::devices::block::qcow2
