// Move-only owners of file descriptors.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>

namespace mvmm {

class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) noexcept : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = std::exchange(o.fd_, -1);
        }
        return *this;
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;

    int get() const noexcept { return fd_; }
    bool valid() const noexcept { return fd_ >= 0; }
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }
    // Gives the descriptor up to a new owner.
    [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  private:
    int fd_ = -1;
};

[[noreturn]] inline void throw_errno(const std::string& what, int err = errno) {
    throw std::system_error(err, std::generic_category(), what);
}

// Throws with `what` when a syscall-style return value is negative.
inline long check_syscall(long ret, const std::string& what) {
    if (ret < 0) throw_errno(what);
    return ret;
}

class EventFd {
  public:
    explicit EventFd(int flags = EFD_CLOEXEC | EFD_NONBLOCK)
        : fd_(static_cast<int>(check_syscall(::eventfd(0, flags), "eventfd"))) {}
    int get() const noexcept { return fd_.get(); }
    void signal() const noexcept {
        uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(fd_.get(), &one, sizeof one);
    }
    // Returns the accumulated count, 0 when nothing was pending.
    uint64_t consume() const noexcept {
        uint64_t v = 0;
        if (::read(fd_.get(), &v, sizeof v) != sizeof v) return 0;
        return v;
    }

  private:
    Fd fd_;
};

}  // namespace mvmm
