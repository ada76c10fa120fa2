// devices::Platform over KVM: legacy lines via KVM_IRQ_LINE, MSI vectors as GSIs routed
// with KVM_SET_GSI_ROUTING and raised through irqfds, doorbells as ioeventfds.
#pragma once

#include <linux/kvm.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "devices/platform.h"
#include "vmm/kvm.h"

namespace mvmm {

class KvmPlatform : public devices::Platform {
  public:
    explicit KvmPlatform(const Vm& vm);

    std::unique_ptr<devices::MsiVector> allocate_msi_vector() override;
    void set_irq_line(uint32_t gsi, bool level) override;
    void add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override;
    void remove_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) override;

    // Called by vectors: (re)route or drop `gsi`, pushing the whole table to KVM.
    void set_msi_route(uint32_t gsi, const devices::MsiMessage& message);
    void release_gsi(uint32_t gsi);

    // KVM_SET_GSI_ROUTING calls so far (each replaces KVM's whole table).
    uint64_t routing_pushes() const noexcept { return routing_pushes_.load(); }

  private:
    void push_routes();  // requires mutex_

    const Vm& vm_;
    std::mutex mutex_;
    uint32_t next_gsi_;
    std::vector<uint32_t> free_gsis_;
    std::map<uint32_t, devices::MsiMessage> msi_routes_;
    std::atomic<uint64_t> routing_pushes_{0};
};

}  // namespace mvmm
