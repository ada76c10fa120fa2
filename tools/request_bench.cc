// The virtio-blk and virtio-scsi request paths without a guest CPU (tools/bench/virtio_rig.h):
// 4 KiB random reads and 64 KiB sequential reads at a fixed queue depth on several queues, or a
// mix of every request the device serves, for each --request-alloc mode and (blk) each aio=
// mode, repetitions interleaved.  Reports IOPS, CPU per request (the whole process by getrusage,
// and the I/O threads alone), the I/O threads' heap allocations per request (counted by
// tools/bench/alloc_counter.cc) and kicks and interrupts per request.  --short is the CI test:
// a few thousand requests per device, load and mode, every answer and byte checked, and not
// one heap allocation on the I/O threads in pool mode, by the hook's count and by the devices'
// own statistics (which must see the one allocation per request of malloc and calloc modes,
// so a count that saw nothing would fail).  tools/request-bench runs it for several allocator
// builds and under callgrind.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/alloc_counter.h"
#include "bench/virtio_rig.h"
#include "vmm/cli/option_parser.h"
#include "vmm/cli/options.h"

#ifdef MVMM_HAVE_CALLGRIND
#include <valgrind/callgrind.h>
#endif

namespace mvmm::bench {
namespace {

struct Options {
    std::vector<std::string> devices{"blk"};
    std::vector<std::string> modes{"pool", "malloc", "calloc"};
    std::vector<std::string> aios{"io_uring", "threads"};  // blk's; scsi has one
    bool cache_none = false;                               // blk's cache=none (O_DIRECT)
    std::vector<std::string> workloads{"rand4k", "seq64k"};
    uint16_t queues = 4;
    uint16_t depth = 32;
    unsigned io_threads = 2;
    uint64_t requests = 20000;  // per queue and run
    unsigned reps = 3;
    std::string image_dir = "/dev/shm";
    std::string image_size = "256M";
    bool short_mode = false;
    bool json = false;
    bool callgrind = false;  // callgrind's counters cover just the measured window
    bool cache_rss = false;
};

struct Sample {
    std::string device, mode, workload;
    unsigned rep = 0;
    uint64_t requests = 0;
    uint64_t io_thread_requests = 0;  // what the allocation counts see (DriverRequests)
    double seconds = 0, iops = 0, mib_per_s = 0;
    double cpu_ns = 0, io_cpu_ns = 0, allocations = 0, kicks = 0, interrupts = 0;  // per request
    uint64_t io_allocations = 0;  // the I/O threads' heap allocations in the measured window
    // From the device's statistics: heap allocations its queues' work made in the measured
    // window (nullopt: not counted), the most requests in flight on a queue, the pools' pages.
    std::optional<uint64_t> device_allocations;
    uint32_t peak_slots = 0;
    uint64_t pool_resident_bytes = 0;
};

uint64_t process_cpu_ns() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    auto ns = [](const timeval& t) {
        return uint64_t(t.tv_sec) * 1'000'000'000 + t.tv_usec * 1000;
    };
    return ns(usage.ru_utime) + ns(usage.ru_stime);
}

// On-CPU time of the given threads (the first field of schedstat, in ns).
uint64_t threads_cpu_ns(const std::vector<pid_t>& tids) {
    uint64_t total = 0;
    for (pid_t tid : tids) {
        std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/schedstat");
        uint64_t ns = 0;
        stat >> ns;
        total += ns;
    }
    return total;
}

// Callgrind's counters cover the measured requests on every thread (the I/O threads do the device
// work; a collection toggle would only cover this one): zeroed when the window opens, dumped as
// the run's first numbered profile (OUT.1) when it closes.
void open_callgrind_window([[maybe_unused]] bool on) {
#ifdef MVMM_HAVE_CALLGRIND
    if (on) CALLGRIND_ZERO_STATS;
#endif
}
void close_callgrind_window([[maybe_unused]] bool on) {
#ifdef MVMM_HAVE_CALLGRIND
    if (on) CALLGRIND_DUMP_STATS_AT("measured requests");
#endif
}

Workload workload_named(const std::string& name) {
    for (Workload w : {Workload::rand4k, Workload::seq64k, Workload::mixed})
        if (name == to_string(w)) return w;
    throw CLI::ValidationError("--workloads", "unknown workload " + name);
}

DeviceKind device_named(const std::string& name) {
    for (DeviceKind d : {DeviceKind::blk, DeviceKind::scsi})
        if (name == to_string(d)) return d;
    throw CLI::ValidationError("--devices", "unknown device " + name);
}

// The heap allocations the device's statistics counted, summed over its queues.
std::optional<uint64_t> counted_allocations(const devices::virtio::DeviceStatistics& statistics) {
    uint64_t total = 0;
    for (const auto& queue : statistics.queues) {
        if (!queue.heap_allocations) return std::nullopt;
        total += *queue.heap_allocations;
    }
    return total;
}

// aio=io_uring|threads|sync as --disk parses it.
devices::block::AioMode aio_named(const std::string& name) {
    using devices::block::AioMode;
    if (name == "io_uring") return AioMode::IoUring;
    if (name == "threads") return AioMode::Threads;
    if (name == "sync") return AioMode::Sync;
    throw std::runtime_error("unknown aio mode " + name + " (io_uring, threads, sync)");
}

// `aio` empty: scsi, which has none.
Sample run_once(const Options& options, const PatternImage& image, const std::string& device,
                const std::string& aio, const std::string& mode, const std::string& workload,
                unsigned rep) {
    VirtioRig rig({.image = image,
                   .device = device_named(device),
                   .workload = workload_named(workload),
                   .queues = options.queues,
                   .depth = options.depth,
                   .request_alloc = parse_request_alloc_option(mode),
                   .blk_io = {.aio = aio.empty() ? std::nullopt : std::optional(aio_named(aio)),
                              .cache = options.cache_none ? devices::block::CacheMode::None
                                                          : devices::block::CacheMode::Writeback},
                   .io_threads = options.io_threads,
                   .verify_every_word = options.short_mode});
    using Clock = std::chrono::steady_clock;
    Clock::time_point t0, t1;
    uint64_t cpu0 = 0, cpu1 = 0, io0 = 0, io1 = 0, alloc0 = 0, alloc1 = 0;
    devices::virtio::DeviceStatistics stats0, stats1;
    const auto tids = rig.io_thread_ids();
    const LoadResult load = rig.run(
        options.requests,
        [&] {
            stats0 = rig.statistics();
            io0 = threads_cpu_ns(tids);
            cpu0 = process_cpu_ns();
            t0 = Clock::now();
            alloc0 = rig.io_thread_allocations();
            open_callgrind_window(options.callgrind);
        },
        [&] {
            close_callgrind_window(options.callgrind);
            alloc1 = rig.io_thread_allocations();
            t1 = Clock::now();
            cpu1 = process_cpu_ns();
            io1 = threads_cpu_ns(tids);
            stats1 = rig.statistics();
        });
    Sample s;
    s.device = aio.empty() ? device : device + "/" + aio;  // blk/io_uring
    s.mode = mode;
    s.workload = workload;
    s.rep = rep;
    s.requests = load.requests;
    s.io_thread_requests = load.io_thread_requests;
    const auto counted0 = counted_allocations(stats0), counted1 = counted_allocations(stats1);
    if (counted0 && counted1) s.device_allocations = *counted1 - *counted0;
    for (const auto& queue : stats1.queues) {
        s.peak_slots = std::max(s.peak_slots, queue.peak_slots_in_use);
        s.pool_resident_bytes += queue.pool_resident_bytes;
    }
    const double n = double(load.requests);
    s.seconds = std::chrono::duration<double>(t1 - t0).count();
    s.iops = n / s.seconds;
    s.mib_per_s = s.iops * (workload == "seq64k" ? 64.0 : 4.0) / 1024;
    s.cpu_ns = double(cpu1 - cpu0) / n;
    s.io_cpu_ns = double(io1 - io0) / n;
    s.io_allocations = alloc1 - alloc0;
    s.allocations = double(s.io_allocations) / n;
    s.kicks = double(load.kicks) / n;
    s.interrupts = double(load.interrupts) / n;
    return s;
}

void print(const Sample& s, bool json) {
    if (json) {
        std::printf(
            "{\"allocator\": \"%s\", \"device\": \"%s\", \"mode\": \"%s\", "
            "\"workload\": \"%s\", \"rep\": %u, \"requests\": %lu, \"seconds\": %.4f, "
            "\"iops\": %.0f, \"mib_per_s\": %.1f, \"cpu_ns_per_request\": %.0f, "
            "\"io_thread_ns_per_request\": %.0f, \"allocations_per_request\": %.4f, "
            "\"kicks_per_request\": %.4f, \"interrupts_per_request\": %.4f, "
            "\"peak_slots_in_use\": %u, \"pool_resident_bytes\": %lu}\n",
            active_allocator(), s.device.c_str(), s.mode.c_str(), s.workload.c_str(), s.rep,
            static_cast<unsigned long>(s.requests), s.seconds, s.iops, s.mib_per_s, s.cpu_ns,
            s.io_cpu_ns, s.allocations, s.kicks, s.interrupts, s.peak_slots,
            static_cast<unsigned long>(s.pool_resident_bytes));
    } else {
        std::printf("%-12s %-7s %-7s %3u %9.0f %8.1f %10.0f %10.0f %10.3f %7.3f %7.3f\n",
                    s.device.c_str(), s.mode.c_str(), s.workload.c_str(), s.rep, s.iops,
                    s.mib_per_s, s.cpu_ns, s.io_cpu_ns, s.allocations, s.kicks, s.interrupts);
    }
    std::fflush(stdout);
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

void print_summary(const std::vector<Sample>& samples) {
    std::map<std::tuple<std::string, std::string, std::string>, std::vector<const Sample*>> groups;
    for (const auto& s : samples) groups[{s.device, s.workload, s.mode}].push_back(&s);
    std::printf("\nmedian of %zu repetitions (allocator %s)\n", groups.begin()->second.size(),
                active_allocator());
    std::printf("%-12s %-7s %-7s %9s %10s %10s %10s\n", "dev", "load", "mode", "IOPS", "cpu ns/req",
                "io ns/req", "allocs/req");
    for (const auto& [key, samples] : groups) {
        const auto& group = samples;  // clang 14 cannot capture a structured binding
        auto of = [&](double Sample::*field) {
            std::vector<double> values;
            for (const Sample* s : group) values.push_back(s->*field);
            return median(values);
        };
        std::printf("%-12s %-7s %-7s %9.0f %10.0f %10.0f %10.3f\n", std::get<0>(key).c_str(),
                    std::get<1>(key).c_str(), std::get<2>(key).c_str(), of(&Sample::iops),
                    of(&Sample::cpu_ns), of(&Sample::io_cpu_ns), of(&Sample::allocations));
    }
}

uint64_t rss_bytes() {
    std::ifstream statm("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    statm >> size >> resident;
    return resident * uint64_t(::sysconf(_SC_PAGESIZE));
}

// The seed of issue 17: a cache of 2,560 blocks of 64 KiB as separate page-aligned heap
// allocations against one lazily touched mapping (a SlotPool), each block used for `used`
// bytes, as a bounce buffer of a smaller I/O is.  Prints the RSS each costs.
void cache_rss(uint64_t used) {
    constexpr size_t kBlocks = 2560, kBlock = 64 * 1024;
    const uint64_t before_pool = rss_bytes();
    uint64_t pool_cost = 0;
    {
        SlotPool pool(kBlock, kBlocks);
        std::vector<SlotPool::Slot> slots;
        for (size_t i = 0; i < kBlocks; ++i) slots.push_back(std::move(*pool.acquire()));
        for (auto& slot : slots) std::memset(slot.bytes().data(), 1, used);
        pool_cost = rss_bytes() - before_pool;
    }
    const uint64_t before_heap = rss_bytes();
    std::vector<void*> blocks(kBlocks);
    for (void*& block : blocks)
        if (::posix_memalign(&block, 4096, kBlock) != 0) throw std::bad_alloc();
    for (void* block : blocks) std::memset(block, 1, used);
    const uint64_t heap_cost = rss_bytes() - before_heap;
    for (void* block : blocks) std::free(block);
    std::printf(
        "cache of %zu x 64 KiB blocks, %lu KiB of each used: one mapping %.1f MiB, "
        "posix_memalign %.1f MiB (%s)\n",
        kBlocks, static_cast<unsigned long>(used / 1024), pool_cost / 1048576.0,
        heap_cost / 1048576.0, active_allocator());
}

// --short's assertions; returns the number of failures.  Pool mode: not one heap allocation on
// the I/O threads in the measured window, whatever the request.  malloc and calloc: one per
// request, its slot, and nothing else, which shows that the count sees the request path.  The
// devices' statistics must count the same.
int check_short(const std::vector<Sample>& samples) {
    int failures = 0;
    for (const auto& s : samples) {
        const uint64_t expected = s.mode == "pool" ? 0 : s.io_thread_requests;
        auto check = [&](const char* counter, std::optional<uint64_t> counted) {
            if (counted == expected) return;
            std::printf(
                "FAIL: %s %s %s: %s heap allocations for %lu requests by %s, expected %lu\n",
                s.device.c_str(), s.workload.c_str(), s.mode.c_str(),
                counted ? std::to_string(*counted).c_str() : "no count of",
                static_cast<unsigned long>(s.io_thread_requests), counter,
                static_cast<unsigned long>(expected));
            ++failures;
        };
        check("the hook's count on the I/O threads", s.io_allocations);
        check("the device's statistics", s.device_allocations);
    }
    return failures;
}

int run(const Options& options) {
    if (options.cache_rss) {
        for (uint64_t used : {4096u, 65536u}) cache_rss(used);
        return 0;
    }
    const PatternImage image(options.image_dir, parse_size(options.image_size));
    if (!options.json)
        std::printf("%-12s %-7s %-7s %3s %9s %8s %10s %10s %10s %7s %7s\n", "dev", "mode", "load",
                    "rep", "IOPS", "MiB/s", "cpu ns/req", "io ns/req", "allocs/req", "kicks",
                    "irqs");
    std::vector<Sample> samples;
    for (unsigned rep = 1; rep <= options.reps; ++rep)
        for (const auto& device : options.devices)
            for (const auto& aio : device == "blk" ? options.aios : std::vector<std::string>{""})
                for (const auto& workload : options.workloads)
                    for (const auto& mode : options.modes) {
                        samples.push_back(
                            run_once(options, image, device, aio, mode, workload, rep));
                        print(samples.back(), options.json);
                    }
    if (!options.json) print_summary(samples);
    if (!options.short_mode) return 0;
    int failures = 0;
    if (counting_allocations())
        failures = check_short(samples);
    else
        std::printf("allocation counting is off in this build\n");
    std::printf("%s: %zu runs, every answer and byte read as expected\n", failures ? "FAIL" : "ok",
                samples.size());
    return failures ? 1 : 0;
}

}  // namespace
}  // namespace mvmm::bench

int main(int argc, char** argv) {
    mvmm::bench::Options options;
    CLI::App app{"virtio-blk and virtio-scsi request-path benchmark (no guest CPU)",
                 "request-bench"};
    app.add_option("--devices", options.devices, "blk, scsi (a controller with one LUN)")
        ->delimiter(',');
    app.add_option("--modes", options.modes, "request-alloc modes: pool, malloc, calloc")
        ->delimiter(',');
    app.add_option("--aios", options.aios,
                   "blk's aio= modes: io_uring, threads, sync (one request at a time per queue)")
        ->delimiter(',');
    app.add_option("--workloads", options.workloads,
                   "rand4k, seq64k, mixed (every request the device serves, in turn)")
        ->delimiter(',');
    app.add_option("--queues", options.queues,
                   "request queues of the device, one driver thread each (scsi's mixed load "
                   "adds its control queue)")
        ->check(CLI::Range(1, 16));
    app.add_option("--depth", options.depth, "requests in flight per queue")
        ->check(CLI::Range(1, 128));
    app.add_option("--io-threads", options.io_threads, "I/O threads")->check(CLI::Range(1, 16));
    app.add_option("--requests", options.requests, "measured requests per queue and run");
    app.add_option("--reps", options.reps, "repetitions, interleaved")->check(CLI::Range(1, 100));
    app.add_option("--image-dir", options.image_dir, "where the raw image goes (tmpfs)");
    app.add_flag("--cache-none", options.cache_none,
                 "blk opens the image with cache=none (O_DIRECT; not on tmpfs before Linux 6.6)");
    app.add_option("--image-size", options.image_size, "image size (K, M, G)");
    app.add_flag("--short", options.short_mode,
                 "CI test: both devices, every load, 1000 requests per queue, 1 repetition, "
                 "every answer and byte checked; pool mode makes no heap allocation on the I/O "
                 "threads, malloc and calloc modes one per request");
    app.add_flag("--json", options.json, "one JSON object per run");
    app.add_flag("--callgrind", options.callgrind,
                 "profile only the measured requests, on every thread: zero callgrind's "
                 "counters before them and dump them after (run under valgrind "
                 "--tool=callgrind --callgrind-out-file=OUT; the profile is OUT.1)");
    app.add_flag("--cache-rss", options.cache_rss,
                 "only compare the RSS of 2,560 64 KiB blocks as one mapping and as separate "
                 "posix_memalign allocations");
    CLI11_PARSE(app, argc, argv);
    if (options.short_mode) {
        options.devices = {"blk", "scsi"};
        options.workloads = {"rand4k", "seq64k", "mixed"};
        options.requests = 1000;
        options.reps = 1;
        options.image_size = "16M";
    }
    if (mvmm::bench::counting_allocations())
        mvmm::devices::virtio::count_heap_allocations_with(&mvmm::bench::thread_allocations);
    try {
        return mvmm::bench::run(options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "request-bench: %s\n", e.what());
        return 1;
    }
}
