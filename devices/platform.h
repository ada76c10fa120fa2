// What device models need from the hypervisor.  vmm/ implements it over KVM (GSI routing,
// irqfd, ioeventfd, KVM_IRQ_LINE); device tests implement it with fakes.
#pragma once

#include <cstdint>
#include <memory>

#include "base/fd.h"
#include "mem/guest_addr.h"

namespace mvmm::devices {

struct MsiMessage {
    uint64_t address = 0;
    uint32_t data = 0;
    bool operator==(const MsiMessage&) const = default;
};

// One MSI/MSI-X vector: a GSI routed to a message and raised through an irqfd.
class MsiVector {
  public:
    virtual ~MsiVector() = default;
    virtual void route(const MsiMessage& message) = 0;
    // Thread-safe; callable from any I/O thread.
    virtual void trigger() = 0;
};

class Platform {
  public:
    virtual ~Platform() = default;
    virtual std::unique_ptr<MsiVector> allocate_msi_vector() = 0;
    // Legacy interrupt line of the IOAPIC/PIC (ISA devices such as the UART).
    virtual void set_irq_line(uint32_t gsi, bool level) = 0;
    // Guest writes of `len` bytes at `addr` signal `fd` without a vCPU exit to userspace.
    virtual void add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) = 0;
    virtual void remove_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) = 0;
};

}  // namespace mvmm::devices
