// Preallocation: faulting in every page of guest RAM before the guest runs, so that a guest
// never stalls on a host page fault and a host short of memory fails at start-up with a
// message instead of later with a crash.  The work is split over threads.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>
#include "base/user_error.h"

namespace mvmm {

enum class PreallocMethod {
    touch,     // write one byte per page
    populate,  // madvise(MADV_POPULATE_WRITE), Linux 5.14+; touch where the kernel lacks it
};

struct PageRange {
    uint64_t first = 0;  // index of the first page
    uint64_t count = 0;
    bool operator==(const PageRange&) const = default;
};

// Splits pages [0, total_pages) into `threads` contiguous ranges, in order, whose sizes differ
// by at most one page: the first total_pages % threads ranges get the extra page.  Ranges are
// empty when threads > total_pages.  Throws std::invalid_argument when threads is 0.
std::vector<PageRange> split_pages(uint64_t total_pages, unsigned threads);

// min(host CPUs this process may run on, guest CPUs, 16).  More threads than host CPUs only
// queue behind each other; the guest's CPU count is the share of the host the user gave this
// VM, so a 2-vCPU guest does not take over a 64-core host while it starts; and past about 16
// threads page faults stop scaling (they contend on the memory cgroup and zone locks).
unsigned default_prealloc_threads(unsigned guest_cpus);

struct PreallocProgress {
    uint64_t done_bytes = 0;
    uint64_t total_bytes = 0;
    double seconds = 0;     // since preallocation started
    bool finished = false;  // the last report, sent once every thread has stopped
};

class PreallocObserver {
  public:
    virtual ~PreallocObserver() = default;
    // Called on the thread that called prealloc(), about ten times a second, and once more
    // with `finished` set (also when preallocation failed).
    virtual void update(const PreallocProgress& progress) = 0;
};

// "preallocating guest RAM: 42% (3.4 of 8.0 GiB, 2.1 GiB/s)"
std::string format_progress(const PreallocProgress& progress);

// Shows progress on one rewritten line of a terminal once preallocation has taken more than a
// second (shorter waits need no indicator); silent when `fd` is not a terminal, so logs and
// pipes get no carriage returns.
class TerminalProgress : public PreallocObserver {
  public:
    explicit TerminalProgress(int fd = STDERR_FILENO);
    void update(const PreallocProgress& progress) override;

  private:
    int fd_;
    bool terminal_;
    bool line_open_ = false;
};

// The kernel could not back a page.  error() is ENOMEM (out of memory), EFAULT (no page to
// back it: out of hugepages in the allowed nodes or cgroup, or a truncated file) or EHWPOISON.
class PreallocError : public UserError {
  public:
    PreallocError(int error, uint64_t done_bytes, uint64_t total_bytes);
    int error() const noexcept { return error_; }
    uint64_t done_bytes() const noexcept { return done_bytes_; }

  private:
    int error_;
    uint64_t done_bytes_;
};

struct PreallocOptions {
    uint64_t page_size = 0;  // the backing's page size: one touch per page
    unsigned threads = 1;
    PreallocMethod method = PreallocMethod::populate;
};

// Faults in every page of `areas` (each page-aligned and a whole number of pages long) for
// writing.  The pages of all areas together are split evenly over the threads.  Throws
// PreallocError when the kernel cannot back a page; the pages faulted in until then stay
// mapped, for the caller to release by unmapping.
void prealloc(std::span<const std::span<uint8_t>> areas, const PreallocOptions& options,
              PreallocObserver* observer = nullptr);

}  // namespace mvmm
