// devices::Platform over KVM: legacy lines via KVM_IRQ_LINE, MSI vectors as GSIs routed
// with KVM_SET_GSI_ROUTING and raised through irqfds, doorbells as ioeventfds.
//
// Routes are pushed lazily.  KVM_SET_GSI_ROUTING replaces the whole table and waits for an
// SRCU grace period, and a booting guest unmasks its vectors one at a time (64 disks: ~200),
// so a route change only updates mvmm's copy; the copy goes to KVM in one push before the
// next irqfd of *any* vector fires.  That is enough: a vector's irqfd is only ever signalled
// by its trigger(), which pushes first, so KVM never delivers a message older than the one
// the device routed before triggering.  A GSI released and not yet pushed keeps a stale route
// in KVM, which nothing can fire: its irqfd is gone, and a vector that reuses the GSI routes
// it (and so pushes) before its first trigger.
#pragma once

#include <linux/kvm.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "devices/platform.h"
#include "vmm/kvm/kvm.h"

namespace mvmm {

class KvmPlatform : public devices::Platform {
  public:
    explicit KvmPlatform(const Vm& vm);

    std::unique_ptr<devices::MsiVector> allocate_msi_vector() override;
    void set_irq_line(uint32_t gsi, bool level) override;
    void add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override;
    void remove_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override;

    // Called by vectors: (re)route or drop `gsi` in mvmm's copy of the routing table.
    void set_msi_route(uint32_t gsi, const devices::MsiMessage& message);
    void release_gsi(uint32_t gsi);
    // Pushes the copy to KVM if it changed since the last push.  Any thread; throws when KVM
    // refuses the table.
    void commit_routes();

    // KVM_SET_GSI_ROUTING calls so far (each replaces KVM's whole table).
    uint64_t routing_pushes() const noexcept { return routing_pushes_.load(); }

  private:
    void push_routes();  // requires mutex_; clears routes_changed_ once KVM has the table

    const Vm& vm_;
    std::mutex mutex_;
    uint32_t next_gsi_;
    std::vector<uint32_t> free_gsis_;
    std::map<uint32_t, devices::MsiMessage> msi_routes_;
    // Set under mutex_ with the change; cleared under mutex_ after the push (release), so a
    // trigger that reads false (acquire) knows KVM has every route changed before it.
    std::atomic<bool> routes_changed_{false};
    std::atomic<uint64_t> routing_pushes_{0};
};

}  // namespace mvmm
