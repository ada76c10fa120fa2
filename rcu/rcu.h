// Userspace RCU for mvmm: readers never block, take a lock or do an atomic read-modify-write;
// writers publish a new version of an object and free the old one once every reader that could
// see it has left its read-side critical section.  See rcu/README.md for the algorithm.
#pragma once

#include <atomic>
#include <cassert>
#include <concepts>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace mvmm::rcu {

namespace detail {

// One per thread.  `period` is 0 outside a read-side critical section, otherwise the value of
// `grace_period` when the outermost read_lock() ran.
struct Reader {
    std::atomic<uint64_t> period{0};
    std::atomic<bool> writer_waiting{false};  // synchronize() wants a wake-up at read_unlock()
    unsigned depth = 0;                       // nesting; touched by the owning thread only
    bool registered = false;
    uint64_t quiescent_in = 0;  // writer bookkeeping, guarded by the registry mutex
};

extern constinit thread_local Reader this_reader;
extern constinit std::atomic<uint64_t> grace_period;
// True once the writers force ordering on every reader with membarrier(2); readers then only
// need to stop the compiler from reordering.
extern constinit std::atomic<bool> writers_use_membarrier;

void register_this_thread();
void wake_writer(Reader& reader) noexcept;

// GCC's ThreadSanitizer does not model fences and warns about them; the ordering is still real,
// and TSan takes its happens-before edges from the release/acquire accesses to Reader::period.
inline void full_fence() noexcept {
#if defined(__SANITIZE_THREAD__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#pragma GCC diagnostic pop
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

inline void reader_fence() noexcept {
    if (writers_use_membarrier.load(std::memory_order_relaxed)) {
        std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
        full_fence();
    }
}

}  // namespace detail

// Registers the calling thread as a reader until the object dies.  read_lock() registers a
// thread lazily (and unregisters it when the thread exits), so this is only needed to end a
// registration early, e.g. before a thread parks for good.
class ThreadRegistration {
  public:
    ThreadRegistration();
    ~ThreadRegistration();
    ThreadRegistration(const ThreadRegistration&) = delete;
    ThreadRegistration& operator=(const ThreadRegistration&) = delete;
};

// Nestable.  Never block inside a read-side critical section: synchronize() waits for it.
inline void read_lock() noexcept {
    detail::Reader& reader = detail::this_reader;
    if (reader.depth++ > 0) return;
    if (!reader.registered) [[unlikely]]
        detail::register_this_thread();
    // Release: a writer that sees this value knows everything the previous critical section
    // read happened before it.
    reader.period.store(detail::grace_period.load(std::memory_order_relaxed),
                        std::memory_order_release);
    // The period must be visible before this section loads any RCU-protected pointer.
    detail::reader_fence();
}

inline void read_unlock() noexcept {
    detail::Reader& reader = detail::this_reader;
    assert(reader.depth > 0);
    if (--reader.depth > 0) return;
    reader.period.store(0, std::memory_order_release);
    // Either synchronize() sees period 0, or we see its writer_waiting flag and wake it.
    detail::reader_fence();
    if (reader.writer_waiting.load(std::memory_order_acquire)) [[unlikely]]
        detail::wake_writer(reader);
}

// RAII read-side critical section; nestable.
class ReadGuard {
  public:
    ReadGuard() noexcept { read_lock(); }
    ~ReadGuard() { read_unlock(); }
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;
};

// Waits until every read-side critical section that began before the call has ended.
// Must not be called inside a read-side critical section.
void synchronize();

// A move-only void() callable: unlike std::function it can own what it frees.
class Callback {
  public:
    template <class F>
    requires std::invocable < std::decay_t<F>
    & > &&(!std::same_as<std::decay_t<F>, Callback>)
            Callback(F&& fn)  // NOLINT(google-explicit-constructor): lambdas convert implicitly
        : impl_(std::make_unique<Impl<std::decay_t<F>>>(std::forward<F>(fn))) {}

    void operator()() { impl_->run(); }

  private:
    struct Base {
        virtual ~Base() = default;
        virtual void run() = 0;
    };
    template <class F>
    struct Impl final : Base {
        explicit Impl(F fn) : fn(std::move(fn)) {}
        void run() override { fn(); }
        F fn;
    };
    std::unique_ptr<Base> impl_;
};

// Queues `fn` to run on the call thread after a grace period; callbacks run in the order they
// were queued.  Starts the call thread if it is not running.
void call(Callback fn);

// Frees `object` on the call thread after a grace period.
template <class T>
void retire(std::unique_ptr<T> object) {
    call([doomed = std::move(object)]() mutable { doomed.reset(); });
}

// Waits until every callback queued before the call has run.  Not from inside a read-side
// critical section or a callback.
void drain();

// Starts the call thread now rather than at the first call().  Idempotent.
void start();

// Drains the queue and joins the call thread; a later call() starts it again.  Also runs at
// exit once the thread has been started.
void stop();

// A pointer that readers load inside a ReadGuard and writers replace with publish();
// the replaced object is freed by the call thread after a grace period.
template <class T>
class Pointer {
  public:
    Pointer() = default;
    explicit Pointer(std::unique_ptr<T> initial) : ptr_(initial.release()) {}
    // No reader may still use the object when the Pointer dies.
    ~Pointer() { std::unique_ptr<T> last(ptr_.load(std::memory_order_relaxed)); }
    Pointer(const Pointer&) = delete;
    Pointer& operator=(const Pointer&) = delete;

    // Only valid inside a ReadGuard; the object stays alive until the guard ends.
    const T* load() const noexcept { return ptr_.load(std::memory_order_acquire); }

    // Writers must serialize publish() calls among themselves.
    void publish(std::unique_ptr<T> next) {
        std::unique_ptr<T> old(ptr_.exchange(next.release(), std::memory_order_acq_rel));
        if (old) retire(std::move(old));
    }

  private:
    std::atomic<T*> ptr_{nullptr};
};

}  // namespace mvmm::rcu
