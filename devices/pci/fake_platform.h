// A Platform for device tests: records MSI routes, triggers and ioeventfds instead of
// talking to KVM.  A route takes effect at once, as KVM's does when the ioctl returns.
// Vectors may be triggered from I/O threads: their counters are atomic, and `on_trigger`
// (set before any trigger) sees each delivery on the triggering thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "devices/platform.h"

namespace mvmm::devices::testing {

class FakePlatform : public Platform {
  public:
    struct Vector {
        size_t index = 0;                   // in allocation order
        std::optional<MsiMessage> message;  // what KVM would deliver
        std::atomic<unsigned> routes{0};
        std::atomic<unsigned> triggers{0};
        std::function<void(const Vector&)> on_trigger;
    };
    struct IoEventFd {
        GuestAddr addr;
        uint32_t len;
        int fd;
        bool operator==(const IoEventFd&) const = default;
    };

    std::unique_ptr<MsiVector> allocate_msi_vector() override {
        vectors.push_back(std::make_shared<Vector>());
        vectors.back()->index = vectors.size() - 1;
        return std::make_unique<FakeVector>(vectors.back());
    }
    void set_irq_line(uint32_t gsi, bool level) override { lines[gsi] = level; }
    // Like KVM: one ioeventfd per address and length.
    void add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override {
        if (std::ranges::any_of(ioeventfds,
                                [&](auto& e) { return e.addr == addr && e.len == len; }))
            throw std::system_error(EEXIST, std::generic_category(), "KVM_IOEVENTFD");
        ioeventfds.push_back({addr, len, fd.get()});
    }
    void remove_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override {
        auto it = std::ranges::find(ioeventfds, IoEventFd{addr, len, fd.get()});
        if (it == ioeventfds.end()) throw std::logic_error("removing an unknown ioeventfd");
        ioeventfds.erase(it);
    }

    std::vector<std::shared_ptr<Vector>> vectors;  // in allocation order
    std::vector<IoEventFd> ioeventfds;
    std::map<uint32_t, bool> lines;

  private:
    class FakeVector : public MsiVector {
      public:
        explicit FakeVector(std::shared_ptr<Vector> state) : state_(std::move(state)) {}
        void route(const MsiMessage& message) override {
            state_->message = message;
            ++state_->routes;
        }
        void trigger() override {
            ++state_->triggers;
            if (state_->on_trigger) state_->on_trigger(*state_);
        }

      private:
        std::shared_ptr<Vector> state_;
    };
};

}  // namespace mvmm::devices::testing
