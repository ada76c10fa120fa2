// prealloc-bench: how fast mvmm preallocates guest RAM, for sizes x page kinds x threads x
// methods, as GiB/s and as a share of this machine's single-thread memset bandwidth (measured
// in the same run on an already-faulted buffer), side by side with QEMU's prealloc when
// qemu-system-x86_64 is installed.  A benchmark, not a test: run it on a quiet machine, as
// root for the hugepage runs (it fills the pool and gives it back).
//
// First touches of memory the outer hypervisor has not backed yet are several times slower
// (docs: PLATFORM.md), so every group starts with an untimed warm-up run, the variants are
// interleaved (each repetition runs them all, starting at a different one), and both the
// minimum and the median are reported.
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/mapping.h"
#include "mem/guest_ram.h"
#include "mem/hugepages.h"
#include "mem/ram_config.h"

extern char** environ;

namespace mvmm {
namespace {

constexpr uint64_t GiB = 1ull << 30;
constexpr const char* kQemu = "qemu-system-x86_64";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

double cpu_seconds(const rusage& usage) {
    const auto seconds = [](timeval t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// CPU time (user + system, all threads) of this process so far.
double own_cpu_seconds() {
    rusage usage{};
    ::getrusage(RUSAGE_SELF, &usage);
    return cpu_seconds(usage);
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const size_t middle = values.size() / 2;
    return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

double minimum(const std::vector<double>& values) {
    return *std::min_element(values.begin(), values.end());
}

// The baseline: single-thread memset over an already-faulted 1 GiB buffer, the ceiling a
// page-zeroing kernel approaches on one CPU.  Timed within every group, interleaved with the
// preallocations, because the machine's load changes it as much as theirs.
class MemsetBaseline {
  public:
    MemsetBaseline() : buffer_(Mapping::anonymous(GiB)) {
        ::madvise(buffer_.bytes().data(), GiB, MADV_HUGEPAGE);  // like guest RAM
        std::memset(buffer_.bytes().data(), 1, GiB);
    }
    double time_one_gib() {
        const auto start = Clock::now();
        std::memset(buffer_.bytes().data(), ++round_, GiB);
        return seconds_since(start);
    }

  private:
    Mapping buffer_;
    uint8_t round_ = 1;
};

bool qemu_installed() {
    for (const char* dir : {"/usr/bin/", "/usr/local/bin/"})
        if (::access((std::string(dir) + kQemu).c_str(), X_OK) == 0) return true;
    return false;
}

// One thing to time: the memset baseline, mvmm with a method, or QEMU with or without
// prealloc.
struct Variant {
    std::string who;  // "memset", "mvmm" or "qemu"
    PreallocMethod method = PreallocMethod::populate;
    unsigned threads = 1;
    bool prealloc = true;
    std::vector<double> seconds{};
    std::vector<double> cpu_seconds{};   // less disturbed by other load than wall time
    std::vector<double> free_seconds{};  // mvmm: unmapping what was preallocated
};

// The RAM layout of a q35 guest that size: below the 2 GiB hole, the rest above 4 GiB.
std::vector<RamRange> layout_of(uint64_t size) {
    const uint64_t low = std::min(size, 2 * GiB);
    std::vector<RamRange> layout{{GuestAddr(0), low}};
    if (size > low) layout.push_back({GuestAddr(4 * GiB), size - low});
    return layout;
}

void run_mvmm(Variant& variant, uint64_t size, const std::string& hugetlbfs) {
    const RamConfig config{.size = size,
                           .path = hugetlbfs,
                           .prealloc = true,
                           .prealloc_threads = variant.threads,
                           .prealloc_method = variant.method};
    const auto layout = layout_of(size);
    auto start = Clock::now();
    const double cpu_start = own_cpu_seconds();
    auto memory = std::make_unique<GuestMemory>(allocate_guest_ram(config, layout, 1));
    variant.seconds.push_back(seconds_since(start));
    variant.cpu_seconds.push_back(own_cpu_seconds() - cpu_start);
    start = Clock::now();
    memory.reset();
    variant.free_seconds.push_back(seconds_since(start));
}

std::vector<std::string> qemu_command(const Variant& variant, uint64_t size,
                                      const std::string& hugetlbfs) {
    std::string backend = hugetlbfs.empty() ? "memory-backend-ram" : "memory-backend-file";
    backend += ",id=m0,size=" + std::to_string(size >> 20) + "M";
    if (!hugetlbfs.empty()) backend += ",mem-path=" + hugetlbfs;
    if (variant.prealloc)
        backend += ",prealloc=on,prealloc-threads=" + std::to_string(variant.threads);
    return {kQemu,         "-accel",   "kvm",
            "-cpu",        "qemu64",   "-object",
            backend,       "-machine", "q35,memory-backend=m0",
            "-S",          "-display", "none",
            "-nodefaults", "-qmp",     "stdio"};
}

// Runs QEMU to its first QMP command and out again; returns false when QEMU failed.
bool run_qemu(Variant& variant, uint64_t size, const std::string& hugetlbfs) {
    std::vector<std::string> args = qemu_command(variant, size, hugetlbfs);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    int ends[2];
    check_syscall(::pipe2(ends, O_CLOEXEC), "pipe");
    Fd read_end(ends[0]), write_end(ends[1]);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, read_end.get(), STDIN_FILENO);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);

    const auto start = Clock::now();
    pid_t pid = 0;
    const int error = ::posix_spawnp(&pid, kQemu, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (error != 0) return false;
    read_end.reset();
    const std::string qmp = "{\"execute\":\"qmp_capabilities\"}\n{\"execute\":\"quit\"}\n";
    [[maybe_unused]] auto written = ::write(write_end.get(), qmp.data(), qmp.size());
    write_end.reset();
    int status = 0;
    rusage usage{};
    ::wait4(pid, &status, 0, &usage);
    variant.seconds.push_back(seconds_since(start));
    variant.cpu_seconds.push_back(cpu_seconds(usage));
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

struct Options {
    std::vector<unsigned> sizes_gib{1, 4, 8};
    std::vector<unsigned> threads{};
    std::vector<std::string> kinds{"anon", "2M"};
    unsigned repetitions = 5;
    bool qemu = true;
};

struct Rates {
    double best, median;  // GiB/s from the fastest and the median time
};

Rates rates(uint64_t bytes, double seconds_min, double seconds_median) {
    const double gib = static_cast<double>(bytes) / GiB;
    return {gib / seconds_min, gib / seconds_median};
}

void report(const std::string& label, double seconds_min, double seconds_median, double cpu_median,
            uint64_t size, Rates memset, const std::string& extra) {
    const Rates r = rates(size, seconds_min, seconds_median);
    std::printf("  %-20s %7.3f %7.3f %7.2f %7.2f %6.2f %6.2f %7.3f  %s\n", label.c_str(),
                seconds_min, seconds_median, r.best, r.median, r.best / memset.best,
                r.median / memset.median, cpu_median, extra.c_str());
}

std::string label_of(const Variant& variant) {
    std::string what = variant.who == "qemu"                     ? "prealloc"
                       : variant.who == "memset"                 ? "faulted"
                       : variant.method == PreallocMethod::touch ? "touch"
                                                                 : "populate";
    return variant.who + " " + std::to_string(variant.threads) + "T " + what;
}

// The group's table: each variant's times and rates, and its speed against memset's.
void print_table(const std::vector<Variant>& variants, const Options& options, uint64_t size,
                 const std::string& kind, bool with_qemu) {
    std::printf("%s, %s pages, %u repetitions\n", format_size(size).c_str(),
                kind == "2M" ? "2 MiB hugetlbfs" : "4 KiB anonymous (THP madvise)",
                options.repetitions);
    std::printf("  %-20s %15s %15s %13s %7s\n", "", "seconds", "GiB/s", "x memset", "CPU s");
    std::printf("  %-20s %7s %7s %7s %7s %6s %6s %7s\n", "variant", "min", "median", "best",
                "median", "best", "median", "median");
    const Variant& memset = variants.front();
    const Rates memset_rates = rates(GiB, minimum(memset.seconds), median(memset.seconds));
    const Variant* qemu_off = with_qemu ? &variants.back() : nullptr;
    for (const Variant& variant : variants) {
        char extra[96] = "";
        if (variant.who == "memset") {
            report(label_of(variant), minimum(variant.seconds), median(variant.seconds),
                   median(variant.seconds), GiB, memset_rates, extra);
        } else if (variant.who == "mvmm") {
            std::snprintf(extra, sizeof extra, "alloc+free med %.3f s",
                          median(variant.seconds) + median(variant.free_seconds));
            report(label_of(variant), minimum(variant.seconds), median(variant.seconds),
                   median(variant.cpu_seconds), size, memset_rates, extra);
        } else if (variant.prealloc) {
            // QEMU's prealloc time: its run with prealloc minus its run without (start-up,
            // exit); this includes freeing the memory at exit.
            std::snprintf(extra, sizeof extra, "(run %.3f s - %.3f s without prealloc)",
                          median(variant.seconds), median(qemu_off->seconds));
            report(label_of(variant), minimum(variant.seconds) - minimum(qemu_off->seconds),
                   median(variant.seconds) - median(qemu_off->seconds),
                   median(variant.cpu_seconds) - median(qemu_off->cpu_seconds), size, memset_rates,
                   extra);
        }
    }
}

// Times every variant for one size and page kind, interleaved, and prints the table.
void bench_group(const Options& options, uint64_t size, const std::string& kind,
                 MemsetBaseline& baseline) {
    std::unique_ptr<HugepageReservation> reservation;
    std::unique_ptr<HugetlbfsMount> mount;
    if (kind == "2M") {
        try {
            reservation = std::make_unique<HugepageReservation>(2ull << 20, size >> 21);
            mount = std::make_unique<HugetlbfsMount>(2ull << 20);
        } catch (const std::exception& e) {
            std::printf("%s %s: skipped: %s\n\n", format_size(size).c_str(), kind.c_str(),
                        e.what());
            return;
        }
    }
    const std::string hugetlbfs = mount ? mount->path() : "";

    std::vector<Variant> variants{{.who = "memset"}};
    for (unsigned threads : options.threads)
        for (PreallocMethod method : {PreallocMethod::touch, PreallocMethod::populate})
            variants.push_back({.who = "mvmm", .method = method, .threads = threads});
    const bool with_qemu = options.qemu && qemu_installed();
    if (with_qemu) {
        for (unsigned threads : options.threads)
            variants.push_back({.who = "qemu", .threads = threads});
        variants.push_back({.who = "qemu", .prealloc = false});
    }

    std::fflush(stdout);
    Variant warm_up{.who = "mvmm", .threads = options.threads.back()};
    run_mvmm(warm_up, size, hugetlbfs);
    for (unsigned rep = 0; rep < options.repetitions; ++rep) {
        for (size_t i = 0; i < variants.size(); ++i) {
            Variant& variant = variants[(i + rep) % variants.size()];
            if (variant.who == "memset") {
                variant.seconds.push_back(baseline.time_one_gib());
            } else if (variant.who == "mvmm") {
                run_mvmm(variant, size, hugetlbfs);
            } else if (!run_qemu(variant, size, hugetlbfs)) {
                std::printf("%s %s: QEMU failed:", format_size(size).c_str(), kind.c_str());
                for (const std::string& arg : qemu_command(variant, size, hugetlbfs))
                    std::printf(" %s", arg.c_str());
                std::printf("\n\n");
                return;
            }
        }
    }

    print_table(variants, options, size, kind, with_qemu);
    std::printf("\n");
}

int run(int argc, char** argv) {
    CLI::App app{"Times guest RAM preallocation (mvmm and QEMU)"};
    Options options;
    bool quick = false;
    app.add_flag("--quick", quick, "sizes 1 and 4 GiB, 3 repetitions");
    app.add_option("--sizes", options.sizes_gib, "sizes in GiB")->delimiter(',');
    app.add_option("--threads", options.threads, "thread counts (default 1,2,host CPUs)")
        ->delimiter(',');
    app.add_option("--kinds", options.kinds, "page kinds: anon, 2M")
        ->delimiter(',')
        ->check(CLI::IsMember({"anon", "2M"}));
    app.add_option("--reps", options.repetitions, "repetitions")->check(CLI::PositiveNumber);
    app.add_flag("!--no-qemu", options.qemu, "skip QEMU");
    CLI11_PARSE(app, argc, argv);
    if (quick) {
        if (app.count("--sizes") == 0) options.sizes_gib = {1, 4};
        if (app.count("--reps") == 0) options.repetitions = 3;
    }
    if (options.threads.empty()) {
        options.threads = {1, 2, default_prealloc_threads(1024)};
        std::sort(options.threads.begin(), options.threads.end());
        options.threads.erase(std::unique(options.threads.begin(), options.threads.end()),
                              options.threads.end());
    }

    utsname host{};
    ::uname(&host);
    std::printf("host: Linux %s, %u CPUs for prealloc; QEMU %s\n\n", host.release,
                default_prealloc_threads(1024), qemu_installed() ? "installed" : "not installed");
    MemsetBaseline baseline;
    for (unsigned gib : options.sizes_gib) {
        const uint64_t size = gib * GiB;
        for (const std::string& kind : options.kinds) {
            if (meminfo_bytes("MemAvailable") < size + GiB) {
                std::printf("%s %s: skipped: less than %s + 1 GiB available\n\n",
                            format_size(size).c_str(), kind.c_str(), format_size(size).c_str());
                continue;
            }
            bench_group(options, size, kind, baseline);
        }
    }
    return 0;
}

}  // namespace
}  // namespace mvmm

int main(int argc, char** argv) {
    try {
        return mvmm::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "prealloc-bench: %s\n", e.what());
        return 1;
    }
}
