// Userspace RCU for mvmm: readers never block or take a lock; writers publish a new version
// of an object and free the old one once every reader that could see it has left its
// read-side critical section.  See rcu/README.md for the algorithm.
#pragma once

#include <atomic>
#include <functional>
#include <memory>

namespace mvmm::rcu {

// Marks the calling thread as a reader for as long as it lives.  Threads that call
// read_lock() register themselves lazily, so this is only needed to control the lifetime
// of the registration explicitly (e.g. a thread that blocks forever must unregister).
class ThreadRegistration {
public:
    ThreadRegistration();
    ~ThreadRegistration();
    ThreadRegistration(const ThreadRegistration&) = delete;
    ThreadRegistration& operator=(const ThreadRegistration&) = delete;
};

void read_lock() noexcept;
void read_unlock() noexcept;

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

// Runs `fn` on the call thread after a grace period.
void call(std::function<void()> fn);

// Waits until every callback queued before the call has run.
void drain();

// A pointer that readers load inside a ReadGuard and writers replace with publish();
// the replaced object is deleted by the call thread after a grace period.
template <class T>
class Pointer {
public:
    Pointer() = default;
    explicit Pointer(std::unique_ptr<T> initial) : ptr_(initial.release()) {}
    ~Pointer() { delete ptr_.load(std::memory_order_relaxed); }
    Pointer(const Pointer&) = delete;
    Pointer& operator=(const Pointer&) = delete;

    // Only valid inside a ReadGuard; the object stays alive until the guard ends.
    const T* load() const noexcept { return ptr_.load(std::memory_order_acquire); }

    // Writers must serialize publish() calls among themselves.
    void publish(std::unique_ptr<T> next) {
        T* old = ptr_.exchange(next.release(), std::memory_order_acq_rel);
        if (old) call([old] { delete old; });
    }

private:
    std::atomic<T*> ptr_{nullptr};
};

}  // namespace mvmm::rcu
