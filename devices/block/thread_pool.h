// aio=threads: the image's blocking calls on a pool of threads shared by every queue of the
// process, as QEMU's thread pool is (one per AioContext, at most 64 workers).  The pool starts
// with a few threads and grows by one whenever the last idle thread takes a job, up to 64 (a
// job posted while every thread blocks in the image finds the spare): a thread is started by a
// pool thread, never by the I/O thread that posts (so posting allocates nothing), and the
// threads stay until the pool goes with its last queue.  Jobs live in the requests
// they run for (PoolJob, io_queue.h), so the pool allocates nothing per job either.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "devices/block/io_queue.h"

namespace mvmm::devices::block {

class ThreadPool {
  public:
    static constexpr unsigned kMaxThreads = 64;
    static constexpr unsigned kFirstThreads = 4;

    // The process's pool, started by its first user and stopped with its last.
    static std::shared_ptr<ThreadPool> shared();

    explicit ThreadPool(unsigned max_threads = kMaxThreads);
    ~ThreadPool();  // waits for the jobs running; none may be waiting
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    // Runs job.run(job) on a pool thread.  `job` stays in place until it has run.
    void post(PoolJob& job) noexcept;
    unsigned threads() const;

  private:
    void serve();
    void start_thread();  // requires mutex_

    const unsigned max_threads_;
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    PoolJob* head_ = nullptr;  // waiting jobs, in order
    PoolJob* tail_ = nullptr;
    unsigned idle_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

// Runs steps of one IoQueue on the shared pool and hands them back to the queue's context: a
// finished step goes on a list and `done` is signalled; collect() takes them off it.
class Offload {
  public:
    Offload(DiskImage& image, const EventFd& done);
    ~Offload();  // every step run must have been collected
    Offload(const Offload&) = delete;
    Offload& operator=(const Offload&) = delete;

    // Runs `request.flight.step` on a pool thread; its result lands in `request.flight.result`.
    void run(IoRequest& request) noexcept;
    // Calls `finished(request)` for each step that ended since the last call, in order.
    template <class Finished>
    void collect(Finished&& finished) {
        IoRequest* request;
        {
            std::lock_guard lock(mutex_);
            request = std::exchange(head_, nullptr);
            tail_ = nullptr;
        }
        while (request) {
            IoRequest* next = request->flight.next;
            finished(*request);
            request = next;
        }
    }

  private:
    static void run_job(PoolJob& job);

    DiskImage& image_;
    const EventFd& done_;
    const std::shared_ptr<ThreadPool> pool_;
    std::mutex mutex_;
    IoRequest* head_ = nullptr;  // finished, in order
    IoRequest* tail_ = nullptr;
};

// The threads backend, for any image; `completions` as for DiskImage::open_queue.
std::unique_ptr<IoQueue> open_pool_queue(DiskImage& image, uint32_t depth,
                                         const EventFd* completions = nullptr);

}  // namespace mvmm::devices::block
