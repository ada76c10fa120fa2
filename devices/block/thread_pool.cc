#include "devices/block/thread_pool.h"

#include <optional>
#include <utility>

#include "base/thread_name.h"

namespace mvmm::devices::block {
namespace {

class PoolQueue final : public IoQueue {
  public:
    PoolQueue(DiskImage& image, uint32_t depth, const EventFd* completions)
        : IoQueue(image, depth),
          own_(completions ? std::nullopt : std::make_optional<EventFd>()),
          done_(completions ? *completions : *own_),
          offload_(image, done_) {}
    int completion_fd() const noexcept override { return done_.get(); }

  private:
    void issue(IoRequest& request) override { offload_.run(request); }
    void poll() override {
        offload_.collect([this](IoRequest& request) { finished(request, request.flight.result); });
    }

    std::optional<EventFd> own_;
    const EventFd& done_;
    Offload offload_;
};

}  // namespace

std::shared_ptr<ThreadPool> ThreadPool::shared() {
    static std::mutex mutex;
    static std::weak_ptr<ThreadPool> current;
    std::lock_guard lock(mutex);
    auto pool = current.lock();
    if (!pool) {
        pool = std::make_shared<ThreadPool>();
        current = pool;
    }
    return pool;
}

ThreadPool::ThreadPool(unsigned max_threads) : max_threads_(max_threads) {
    std::lock_guard lock(mutex_);
    threads_.reserve(max_threads_);  // start_thread() then only makes the thread
    for (unsigned i = 0; i < std::min(kFirstThreads, max_threads_); ++i) start_thread();
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    // No thread starts another once stopping_ is set, so the list no longer changes.
    for (auto& thread : threads_) thread.join();
}

void ThreadPool::start_thread() {
    threads_.emplace_back([this] {
        name_this_thread("aio-pool");
        serve();
    });
}

unsigned ThreadPool::threads() const {
    std::lock_guard lock(mutex_);
    return static_cast<unsigned>(threads_.size());
}

void ThreadPool::post(PoolJob& job) noexcept {
    job.next = nullptr;
    {
        std::lock_guard lock(mutex_);
        if (tail_)
            tail_->next = &job;
        else
            head_ = &job;
        tail_ = &job;
    }
    wake_.notify_one();
}

void ThreadPool::serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
        ++idle_;
        wake_.wait(lock, [&] { return head_ || stopping_; });
        --idle_;
        if (stopping_) return;
        PoolJob& job = *head_;
        head_ = job.next;
        if (!head_) tail_ = nullptr;
        // Nobody left free: one more thread, up to the limit, so that the next job posted has a
        // thread to take it even while every other one blocks in the image.
        if (idle_ == 0 && threads_.size() < max_threads_) start_thread();
        lock.unlock();
        job.run(job);
        lock.lock();
    }
}

Offload::Offload(DiskImage& image, const EventFd& done)
    : image_(image), done_(done), pool_(ThreadPool::shared()) {}

Offload::~Offload() {
    std::lock_guard lock(mutex_);  // a job that signalled the last step has let go
}

void Offload::run(IoRequest& request) noexcept {
    request.flight.job = {.run = &Offload::run_job, .owner = this, .item = &request, .next = {}};
    pool_->post(request.flight.job);
}

void Offload::run_job(PoolJob& job) {
    auto& self = *static_cast<Offload*>(job.owner);
    auto& request = *static_cast<IoRequest*>(job.item);
    request.flight.result = run_step(self.image_, request.flight.step);
    request.flight.next = nullptr;
    {
        std::lock_guard lock(self.mutex_);
        if (self.tail_)
            self.tail_->flight.next = &request;
        else
            self.head_ = &request;
        self.tail_ = &request;
        // Inside the lock: once the queue has collected the request, it may go (and
        // ~Offload takes the lock first), so the job touches nothing after it.
        self.done_.signal();
    }
}

std::unique_ptr<IoQueue> open_pool_queue(DiskImage& image, uint32_t depth,
                                         const EventFd* completions) {
    return std::make_unique<PoolQueue>(image, depth, completions);
}

}  // namespace mvmm::devices::block
