#include "bench/rig_parts.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "bench/requests.h"

namespace mvmm::bench {
namespace {

class MsiEventFd : public devices::MsiVector {
  public:
    explicit MsiEventFd(const EventFd& fd) : fd_(fd) {}
    void route(const devices::MsiMessage&) override {}
    void trigger() override { fd_.signal(); }

  private:
    const EventFd& fd_;
};

}  // namespace

PatternImage::PatternImage(const std::string& dir, uint64_t size) : size_(size) {
    if (size < 2 * kScratchBytes) throw std::invalid_argument("a pattern image needs 2 MiB");
    path_ = dir + "/mvmm-request-bench-XXXXXX";
    Fd fd(::mkstemp(path_.data()));
    if (!fd.valid()) throw_errno("creating an image in " + dir);
    std::vector<uint64_t> chunk(1 << 17);  // 1 MiB
    for (uint64_t at = 0; at < size; at += chunk.size() * 8) {
        for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = pattern_word(at + i * 8);
        const size_t bytes = std::min<uint64_t>(chunk.size() * 8, size - at);
        if (::pwrite(fd.get(), chunk.data(), bytes, static_cast<off_t>(at)) != ssize_t(bytes))
            throw_errno("writing " + path_);
    }
}

PatternImage::~PatternImage() {
    ::unlink(path_.c_str());
}

std::unique_ptr<devices::MsiVector> EventFdPlatform::allocate_msi_vector() {
    return std::make_unique<MsiEventFd>(vectors_.emplace_back());
}

void EventFdPlatform::add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) {
    if (len == 2) ioeventfds_.emplace_back(addr, fd.get());
}

void EventFdPlatform::remove_ioeventfd(GuestAddr addr, uint32_t, const EventFd& fd) {
    std::erase(ioeventfds_, std::pair{addr, fd.get()});
}

int EventFdPlatform::ioeventfd(GuestAddr addr) const {
    for (const auto& [at, fd] : ioeventfds_)
        if (at == addr) return fd;
    return -1;
}

// Until an eventfd is signalled, or 10 s; consumes the signal.
void wait_for_interrupt(const EventFd& fd, uint16_t queue) {
    pollfd p{.fd = fd.get(), .events = POLLIN, .revents = 0};
    const int ready = ::poll(&p, 1, 10'000);
    if (ready == 0)
        throw std::runtime_error("queue " + std::to_string(queue) + " stalled for 10 s");
    uint64_t count;
    if (ready < 0 || ::read(fd.get(), &count, sizeof count) != sizeof count)
        throw std::runtime_error("waiting for an interrupt failed");
}

}  // namespace mvmm::bench
