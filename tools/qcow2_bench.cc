// qcow2-bench: the qcow2 engine against the raw image on the same data, and the memory of its
// two cache layouts.  A benchmark, not a test: run it on a quiet machine (tools/qcow2-bench).
//
// Throughput: a raw image filled with data and the same data converted to qcow2 (qemu-img),
// in --dir (default /dev/shm, so the disk is not what is measured): sequential 1 MiB reads
// of the whole disk and random 4 KiB reads, one thread and four, the variants interleaved in
// every repetition; minimum and median reported.  --cache none opens both with O_DIRECT (give
// a --dir on a disk: tmpfs has no O_DIRECT before Linux 6.6), the buffers page-aligned as the
// queues would hand them.
//
// Memory: a 4 GiB qcow2 image with its metadata preallocated (every L2 table full) read at
// random all over, in a fresh process per cache layout: heap in use (mallinfo2) and RSS before,
// after the reads, after clean_idle() dropped the idle tables, and after malloc_trim().
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/mapping.h"
#include "devices/block/disk_image.h"
#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/qcow2_image.h"

namespace {

using namespace mvmm::devices;
using Clock = std::chrono::steady_clock;
constexpr uint64_t MiB = 1 << 20;

void shell(const std::string& command) {
    if (std::system(command.c_str()) != 0) {
        std::fprintf(stderr, "qcow2-bench: failed: %s\n", command.c_str());
        std::exit(1);
    }
}

// Reads `count` requests of `size` bytes from `image` on `threads` threads: sequential over the
// disk or at random 4 KiB-aligned offsets.  Returns seconds.
double run_reads(const block::DiskImage& image, uint64_t disk, uint64_t size, uint64_t count,
                 bool random, int threads) {
    std::atomic<bool> failed{false};
    const auto start = Clock::now();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            const mvmm::Mapping buffer =
                mvmm::Mapping::anonymous(size);  // page-aligned, for O_DIRECT
            const block::qcow2::HostBuffer into(buffer.bytes());
            std::mt19937_64 rng(t + 1);
            for (uint64_t i = t; i < count; i += threads) {
                const uint64_t offset = random ? rng() % (disk / size) * size : i * size % disk;
                if (!image.read(offset, into.buffers())) failed = true;
            }
        });
    }
    for (auto& w : workers) w.join();
    if (failed) {
        std::fprintf(stderr, "qcow2-bench: a read failed\n");
        std::exit(1);
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Workload {
    const char* name;
    uint64_t size;
    bool random;
    int threads;
};

void throughput(const std::string& dir, uint64_t disk, int reps, uint64_t random_reads,
                block::CacheMode cache) {
    // Both images written by qemu-img from one source: how a file was written (page by page by
    // `head`, or in big writes) changes how fast tmpfs reads it, by up to 2x.
    const std::string source = dir + "/qcow2-bench.source", raw = dir + "/qcow2-bench.raw",
                      qcow2 = dir + "/qcow2-bench.qcow2";
    shell("head -c " + std::to_string(disk) + " /dev/urandom > " + source);
    shell("qemu-img convert -f raw -O raw " + source + " " + raw);
    shell("qemu-img convert -f raw -O qcow2 " + source + " " + qcow2);
    std::remove(source.c_str());
    const auto raw_image = block::open_disk_image(raw, true, {.cache = cache});
    const auto qcow2_image = block::open_disk_image(qcow2, true, {.cache = cache});
    const Workload workloads[] = {{"sequential 1 MiB", MiB, false, 1},
                                  {"random 4 KiB", 4096, true, 1},
                                  {"random 4 KiB x4 threads", 4096, true, 4}};
    std::printf("throughput: %lu MiB disk in %s, cache=%s, %d repetitions (min / median)\n",
                static_cast<unsigned long>(disk / MiB), dir.c_str(),
                std::string(block::to_string(cache)).c_str(), reps);
    for (const Workload& w : workloads) {
        const uint64_t count = w.random ? random_reads : disk / w.size;
        std::vector<double> raw_s, qcow2_s;
        run_reads(*qcow2_image, disk, w.size, count / 10, w.random, w.threads);  // warm-up
        for (int r = 0; r < reps; ++r) {
            // Interleaved, each repetition starting with the other one.
            const bool raw_first = r % 2 == 0;
            for (int k = 0; k < 2; ++k) {
                const bool is_raw = (k == 0) == raw_first;
                const double s = run_reads(is_raw ? *raw_image : *qcow2_image, disk, w.size, count,
                                           w.random, w.threads);
                (is_raw ? raw_s : qcow2_s).push_back(s);
            }
        }
        auto rate = [&](std::vector<double> s, bool best) {
            std::sort(s.begin(), s.end());
            const double t = best ? s.front() : s[s.size() / 2];
            return w.random ? count / t / 1000 : count * w.size / t / (1 << 30);
        };
        const char* unit = w.random ? "kIOPS" : "GiB/s";
        std::printf("  %-26s raw %7.1f / %7.1f %s   qcow2 %7.1f / %7.1f %s   qcow2/raw %.2f\n",
                    w.name, rate(raw_s, true), rate(raw_s, false), unit, rate(qcow2_s, true),
                    rate(qcow2_s, false), unit, rate(qcow2_s, false) / rate(raw_s, false));
    }
    std::remove(raw.c_str());
    std::remove(qcow2.c_str());
}

uint64_t rss_bytes() {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

void memory_line(const char* when, const block::qcow2::Qcow2Image& image) {
    const auto l2 = image.cache_stats().l2;
    std::printf(
        "    %-22s heap %7.2f MiB  rss %7.2f MiB  l2: %5lu tables, %6.2f MiB resident, "
        "%6.2f MiB allocated\n",
        when, mallinfo2().uordblks / double(MiB), rss_bytes() / double(MiB),
        static_cast<unsigned long>(l2.entries), l2.bytes_resident / double(MiB),
        l2.bytes_allocated / double(MiB));
}

// In a child process, so each layout starts from a fresh heap.
void memory_variant(const std::string& path, block::qcow2::CacheAlloc alloc, uint64_t disk) {
    std::fflush(stdout);
    const pid_t child = ::fork();
    if (child != 0) {
        ::waitpid(child, nullptr, 0);
        return;
    }
    std::printf("  %s\n", alloc == block::qcow2::CacheAlloc::Mapping ? "mapping" : "heap");
    {
        auto image = block::qcow2::Qcow2Image::open(path, true, {.cache_alloc = alloc});
        memory_line("opened", *image);
        const double s = run_reads(*image, disk, 4096, 400000, true, 1);
        memory_line("after random reads", *image);
        std::printf("    (%.0f kIOPS)\n", 400000 / s / 1000);
        const auto t0 = Clock::now();
        image->clean_idle(t0);
        image->clean_idle(t0 + std::chrono::seconds(600));
        memory_line("after clean_idle", *image);
        ::malloc_trim(0);
        memory_line("after malloc_trim", *image);
    }
    std::fflush(stdout);
    ::_exit(0);
}

void memory(const std::string& dir, uint64_t cluster) {
    const uint64_t disk = 4ull << 30;
    const std::string path = dir + "/qcow2-bench-meta.qcow2";
    shell("qemu-img create -q -f qcow2 -o preallocation=metadata,cluster_size=" +
          std::to_string(cluster) + " " + path + " 4G");
    std::printf(
        "memory: 4 GiB disk, %lu KiB clusters, default l2-cache-size (covers the disk up "
        "to 32 MiB), 400k random 4 KiB reads\n",
        static_cast<unsigned long>(cluster / 1024));
    for (const auto alloc : {block::qcow2::CacheAlloc::Mapping, block::qcow2::CacheAlloc::Heap})
        memory_variant(path, alloc, disk);
    std::remove(path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app("qcow2 engine benchmark: throughput against raw, memory of the cache layouts");
    std::string dir = "/dev/shm";
    uint64_t disk_mib = 1024;
    int reps = 5;
    bool skip_throughput = false, skip_memory = false;
    uint64_t random_reads = 200000;
    app.add_option("--dir", dir, "where the images go");
    app.add_option("--disk-mib", disk_mib, "throughput disk size");
    app.add_option("--reps", reps, "repetitions");
    app.add_option("--random-reads", random_reads, "reads per random run");
    std::string cache_name = "writeback";
    app.add_option("--cache", cache_name, "writeback or none (O_DIRECT) for the throughput images")
        ->check(CLI::IsMember({"writeback", "none"}));
    app.add_flag("--no-throughput", skip_throughput);
    app.add_flag("--no-memory", skip_memory);
    CLI11_PARSE(app, argc, argv);
    if (!skip_throughput)
        throughput(dir, disk_mib * MiB, reps, random_reads,
                   cache_name == "none" ? block::CacheMode::None : block::CacheMode::Writeback);
    if (!skip_memory) {
        memory(dir, 4096);
        memory(dir, 65536);
    }
    return 0;
}
