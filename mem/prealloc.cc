#include "mem/prealloc.h"

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csetjmp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <latch>
#include <mutex>
#include <optional>
#include <thread>

#include "base/fd.h"

namespace mvmm {

std::vector<PageRange> split_pages(uint64_t total_pages, unsigned threads) {
    if (threads == 0) throw std::invalid_argument("split_pages: at least one thread is needed");
    const uint64_t per_thread = total_pages / threads;
    const uint64_t extra = total_pages % threads;
    std::vector<PageRange> ranges;
    ranges.reserve(threads);
    uint64_t first = 0;
    for (unsigned i = 0; i < threads; ++i) {
        const uint64_t count = per_thread + (i < extra ? 1 : 0);
        ranges.push_back({first, count});
        first += count;
    }
    return ranges;
}

namespace {

unsigned host_cpus() {
    cpu_set_t allowed;
    if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        return static_cast<unsigned>(CPU_COUNT(&allowed));
    return std::thread::hardware_concurrency();  // more than CPU_SETSIZE CPUs
}

}  // namespace

unsigned default_prealloc_threads(unsigned guest_cpus) {
    return std::max(1u, std::min({host_cpus(), guest_cpus, 16u}));
}

std::string format_progress(const PreallocProgress& progress) {
    constexpr double gib = 1024.0 * 1024 * 1024;
    const unsigned percent =
        progress.total_bytes
            ? static_cast<unsigned>(progress.done_bytes * 100 / progress.total_bytes)
            : 100;
    const double rate = progress.seconds > 0 ? progress.done_bytes / gib / progress.seconds : 0;
    char line[128];
    std::snprintf(line, sizeof line, "preallocating guest RAM: %u%% (%.1f of %.1f GiB, %.1f GiB/s)",
                  percent, progress.done_bytes / gib, progress.total_bytes / gib, rate);
    return line;
}

TerminalProgress::TerminalProgress(int fd) : fd_(fd), terminal_(::isatty(fd) == 1) {}

void TerminalProgress::update(const PreallocProgress& progress) {
    if (!terminal_ || (!line_open_ && progress.seconds < 1.0)) return;
    // "\r" goes back to the start of the line and "\033[K" clears what a longer line left.
    std::string line = "\r";
    line += format_progress(progress);
    line += "\033[K";
    if (progress.finished) line += '\n';
    [[maybe_unused]] auto written = ::write(fd_, line.data(), line.size());
    line_open_ = !progress.finished;
}

PreallocError::PreallocError(int error, uint64_t done_bytes, uint64_t total_bytes)
    : UserError("could not preallocate guest RAM after " + std::to_string(done_bytes >> 20) +
                " of " + std::to_string(total_bytes >> 20) + " MiB: " + std::strerror(error)),
      error_(error),
      done_bytes_(done_bytes) {}

namespace {

// A thread checks for another thread's failure and reports progress this often.
constexpr uint64_t kChunkBytes = 64ull << 20;

// Touching a page the kernel cannot back (no free hugepage in the nodes or cgroup allowed, a
// truncated file) raises SIGBUS.  The touch loop is guarded the way QEMU does it: a SIGBUS
// handler jumps back to the sigsetjmp() taken by the touching thread.  Safe here because the
// loop between the two holds no object with a destructor.
thread_local sigjmp_buf* sigbus_escape = nullptr;

void on_sigbus(int, siginfo_t*, void*) {
    if (sigbus_escape) siglongjmp(*sigbus_escape, 1);
    // Not a touch of ours: take the default action, which the faulting instruction raises
    // again when it reruns.
    ::signal(SIGBUS, SIG_DFL);
}

// Owns the process-wide SIGBUS handler while alive; one touch preallocation at a time.
class SigbusGuard {
  public:
    SigbusGuard() : lock_(owner()) {
        struct sigaction action {};
        action.sa_sigaction = on_sigbus;
        action.sa_flags = SA_SIGINFO;
        sigemptyset(&action.sa_mask);
        check_syscall(::sigaction(SIGBUS, &action, &previous_), "sigaction(SIGBUS)");
    }
    ~SigbusGuard() { ::sigaction(SIGBUS, &previous_, nullptr); }
    SigbusGuard(const SigbusGuard&) = delete;
    SigbusGuard& operator=(const SigbusGuard&) = delete;

  private:
    static std::mutex& owner() {
        static std::mutex mutex;
        return mutex;
    }
    std::unique_lock<std::mutex> lock_;
    struct sigaction previous_ {};
};

[[gnu::noinline]] void write_each_page(uint8_t* start, uint64_t length, uint64_t page_size) {
    // The RAM is always new (anonymous, a new memfd, a new unlinked file), so writing a zero
    // loses nothing; it costs one write fault, where reading the byte first and writing it
    // back would fault twice on private anonymous memory (zero page, then a copy).
    for (uint64_t offset = 0; offset < length; offset += page_size)
        *reinterpret_cast<volatile uint8_t*>(start + offset) = 0;
}

// Returns 0, or EFAULT when the kernel raised SIGBUS for a page.
int touch_pages(std::span<uint8_t> chunk, uint64_t page_size) {
    sigjmp_buf escape;
    if (sigsetjmp(escape, 1) != 0) {
        sigbus_escape = nullptr;
        return EFAULT;
    }
    sigbus_escape = &escape;
    write_each_page(chunk.data(), chunk.size(), page_size);
    sigbus_escape = nullptr;
    return 0;
}

// Returns 0 or the errno of MADV_POPULATE_WRITE, which reports what a touch would have
// turned into SIGBUS (EFAULT) or the OOM killer (ENOMEM).
int populate_pages(std::span<uint8_t> chunk) {
    while (::madvise(chunk.data(), chunk.size(), MADV_POPULATE_WRITE) != 0)
        if (errno != EINTR) return errno;
    return 0;
}

// Kernels before 5.14 reject the advice itself, before looking at the (empty) range.
bool kernel_has_populate_write(void* page) {
    return ::madvise(page, 0, MADV_POPULATE_WRITE) == 0;
}

// Calls fn(piece) for the part of each area that pages [range.first, +range.count) of all
// areas laid end to end cover, until fn returns false.
template <class Fn>
void for_each_piece(std::span<const std::span<uint8_t>> areas, uint64_t page_size, PageRange range,
                    Fn fn) {
    uint64_t area_first = 0;
    for (std::span<uint8_t> area : areas) {
        const uint64_t area_end = area_first + area.size() / page_size;
        const uint64_t first = std::max(range.first, area_first);
        const uint64_t end = std::min(range.first + range.count, area_end);
        if (first < end &&
            !fn(area.subspan((first - area_first) * page_size, (end - first) * page_size)))
            return;
        area_first = area_end;
    }
}

// What the preallocating threads share.
struct Run {
    Run(std::span<const std::span<uint8_t>> areas, uint64_t page_size, PreallocMethod method)
        : areas(areas), page_size(page_size), method(method) {}

    std::span<const std::span<uint8_t>> areas;
    uint64_t page_size;
    PreallocMethod method;
    std::latch start{1};
    std::atomic<uint64_t> done_bytes{0};
    std::atomic<int> error{0};  // the first failure stops every thread
    std::mutex mutex;
    std::condition_variable stopped;
    unsigned running = 0;
};

void fault_in(Run& run, PageRange range) {
    run.start.wait();
    const uint64_t chunk_bytes =
        std::max(run.page_size, kChunkBytes / run.page_size * run.page_size);
    for_each_piece(run.areas, run.page_size, range, [&](std::span<uint8_t> piece) {
        for (uint64_t offset = 0; offset < piece.size(); offset += chunk_bytes) {
            if (run.error.load(std::memory_order_relaxed) != 0) return false;
            auto chunk = piece.subspan(offset, std::min(chunk_bytes, piece.size() - offset));
            const int error = run.method == PreallocMethod::populate
                                  ? populate_pages(chunk)
                                  : touch_pages(chunk, run.page_size);
            if (error != 0) {
                int none = 0;
                run.error.compare_exchange_strong(none, error);
                return false;
            }
            run.done_bytes.fetch_add(chunk.size(), std::memory_order_relaxed);
        }
        return true;
    });
    {
        std::lock_guard lock(run.mutex);
        --run.running;
    }
    run.stopped.notify_one();
}

}  // namespace

void prealloc(std::span<const std::span<uint8_t>> areas, const PreallocOptions& options,
              PreallocObserver* observer) {
    const uint64_t page_size = options.page_size;
    if (page_size == 0 || (page_size & (page_size - 1)) != 0)
        throw std::invalid_argument("prealloc: page size must be a power of two");
    uint64_t total_bytes = 0;
    for (std::span<uint8_t> area : areas) {
        if (reinterpret_cast<uintptr_t>(area.data()) % page_size != 0 || area.size() % page_size)
            throw std::invalid_argument("prealloc: areas must be whole, aligned pages");
        total_bytes += area.size();
    }
    const uint64_t total_pages = total_bytes / page_size;
    if (total_pages == 0) return;

    Run run(areas, page_size, options.method);
    if (run.method == PreallocMethod::populate && !kernel_has_populate_write(areas.front().data()))
        run.method = PreallocMethod::touch;
    std::optional<SigbusGuard> sigbus_guard;
    if (run.method == PreallocMethod::touch) sigbus_guard.emplace();

    const auto threads =
        static_cast<unsigned>(std::clamp<uint64_t>(options.threads, 1, total_pages));
    run.running = threads;
    std::vector<std::jthread> workers;
    workers.reserve(threads);
    try {
        // Every thread exists (its stack mapped) before any faults pages in, so creating
        // threads does not wait for mmap_lock behind page faults.
        for (PageRange range : split_pages(total_pages, threads))
            workers.emplace_back(fault_in, std::ref(run), range);
    } catch (...) {
        run.error = ECANCELED;  // the threads that exist return at once
        run.start.count_down();
        throw;
    }
    const auto begin = std::chrono::steady_clock::now();
    run.start.count_down();

    for (bool finished = false; !finished;) {
        {
            std::unique_lock lock(run.mutex);
            finished = run.stopped.wait_for(lock, std::chrono::milliseconds(100),
                                            [&] { return run.running == 0; });
        }
        if (observer) {
            const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - begin;
            observer->update({.done_bytes = run.done_bytes,
                              .total_bytes = total_bytes,
                              .seconds = elapsed.count(),
                              .finished = finished});
        }
    }
    workers.clear();
    if (const int error = run.error) throw PreallocError(error, run.done_bytes, total_bytes);
}

}  // namespace mvmm
