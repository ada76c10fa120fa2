// What the request bench's rig (virtio_rig.h) stands its device on: a pattern image on tmpfs,
// and a platform that kicks and interrupts through eventfds as KVM does.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/fd.h"
#include "devices/platform.h"
#include "mem/guest_addr.h"

namespace mvmm::bench {

// A raw image of `size` bytes of pattern_word() in `dir` (tmpfs: no disk in the way), removed
// with the object.
class PatternImage {
  public:
    PatternImage(const std::string& dir, uint64_t size);
    ~PatternImage();
    PatternImage(const PatternImage&) = delete;
    PatternImage& operator=(const PatternImage&) = delete;
    const std::string& path() const noexcept { return path_; }
    uint64_t size() const noexcept { return size_; }

  private:
    std::string path_;
    uint64_t size_;
};

// Kicks and interrupts as KVM does them: each MSI vector signals an eventfd (an irqfd), and a
// guest write to a registered notify address signals that queue's ioeventfd.
class EventFdPlatform : public devices::Platform {
  public:
    std::unique_ptr<devices::MsiVector> allocate_msi_vector() override;
    void set_irq_line(uint32_t, bool) override {}
    void add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override;
    void remove_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override;

    // MSI-X table entry `index`'s eventfd (vectors are allocated in table order).
    const EventFd& vector(size_t index) const { return vectors_.at(index); }
    // The eventfd KVM would signal for a 2-byte write at `addr`; -1 when none is registered.
    int ioeventfd(GuestAddr addr) const;

  private:
    std::deque<EventFd> vectors_;
    std::vector<std::pair<GuestAddr, int>> ioeventfds_;
};

// Until `fd` (queue `queue`'s interrupt) is signalled, or 10 s (then it throws, naming the
// queue); consumes the signal.
void wait_for_interrupt(const EventFd& fd, uint16_t queue);

}  // namespace mvmm::bench
