#include "vmm/kvm/kvm_platform.h"

#include <sys/ioctl.h>

#include <stdexcept>
#include <vector>

namespace mvmm {

namespace {

constexpr uint32_t kIoapicPins = 24;
constexpr uint32_t kPicPins = 16;
constexpr uint32_t kPicCascadePin = 2;

class KvmMsiVector : public devices::MsiVector {
  public:
    KvmMsiVector(KvmPlatform& platform, int vm_fd, uint32_t gsi)
        : platform_(platform), vm_fd_(vm_fd), gsi_(gsi) {
        kvm_irqfd irqfd{};
        irqfd.fd = static_cast<uint32_t>(trigger_.get());
        irqfd.gsi = gsi_;
        check_syscall(::ioctl(vm_fd_, KVM_IRQFD, &irqfd), "KVM_IRQFD");
    }
    ~KvmMsiVector() override {
        kvm_irqfd irqfd{};
        irqfd.fd = static_cast<uint32_t>(trigger_.get());
        irqfd.gsi = gsi_;
        irqfd.flags = KVM_IRQFD_FLAG_DEASSIGN;
        ::ioctl(vm_fd_, KVM_IRQFD, &irqfd);
        platform_.release_gsi(gsi_);
    }
    void route(const devices::MsiMessage& message) override {
        platform_.set_msi_route(gsi_, message);
    }
    void trigger() override {
        platform_.commit_routes();
        trigger_.signal();
    }

  private:
    KvmPlatform& platform_;
    int vm_fd_;
    uint32_t gsi_;
    EventFd trigger_;
};

void ioeventfd(int vm_fd, GuestAddr addr, uint32_t len, const EventFd& fd, uint32_t flags) {
    kvm_ioeventfd io{};
    io.addr = addr.value();
    io.len = len;
    io.fd = fd.get();
    io.flags = flags;
    check_syscall(::ioctl(vm_fd, KVM_IOEVENTFD, &io), "KVM_IOEVENTFD");
}

}  // namespace

KvmPlatform::KvmPlatform(const Vm& vm) : vm_(vm), next_gsi_(kIoapicPins) {
    std::lock_guard lock(mutex_);
    push_routes();
}

std::unique_ptr<devices::MsiVector> KvmPlatform::allocate_msi_vector() {
    uint32_t gsi;
    {
        std::lock_guard lock(mutex_);
        if (!free_gsis_.empty()) {
            gsi = free_gsis_.back();
            free_gsis_.pop_back();
        } else {
            gsi = next_gsi_++;
        }
    }
    return std::make_unique<KvmMsiVector>(*this, vm_.fd(), gsi);
}

void KvmPlatform::set_irq_line(uint32_t gsi, bool level) {
    vm_.set_irq_line(gsi, level);
}

void KvmPlatform::add_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) {
    ioeventfd(vm_.fd(), addr, len, fd, 0);
}

void KvmPlatform::remove_ioeventfd(GuestAddr addr, uint32_t len, const EventFd& fd) {
    ioeventfd(vm_.fd(), addr, len, fd, KVM_IOEVENTFD_FLAG_DEASSIGN);
}

void KvmPlatform::set_msi_route(uint32_t gsi, const devices::MsiMessage& message) {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = msi_routes_.try_emplace(gsi, message);
    if (!inserted && it->second == message) return;
    it->second = message;
    routes_changed_.store(true, std::memory_order_relaxed);
}

void KvmPlatform::release_gsi(uint32_t gsi) {
    std::lock_guard lock(mutex_);
    if (msi_routes_.erase(gsi)) routes_changed_.store(true, std::memory_order_relaxed);
    free_gsis_.push_back(gsi);
}

void KvmPlatform::commit_routes() {
    if (!routes_changed_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mutex_);
    if (routes_changed_.load(std::memory_order_relaxed)) push_routes();
}

void KvmPlatform::push_routes() {
    // KVM_SET_GSI_ROUTING replaces the whole table, so the default PIC and IOAPIC routes
    // of the legacy lines go in every time.
    std::vector<kvm_irq_routing_entry> entries;
    for (uint32_t gsi = 0; gsi < kIoapicPins; ++gsi) {
        kvm_irq_routing_entry e{};
        e.gsi = gsi;
        e.type = KVM_IRQ_ROUTING_IRQCHIP;
        if (gsi < kPicPins && gsi != kPicCascadePin) {
            e.u.irqchip.irqchip = gsi < 8 ? KVM_IRQCHIP_PIC_MASTER : KVM_IRQCHIP_PIC_SLAVE;
            e.u.irqchip.pin = gsi % 8;
            entries.push_back(e);
        }
        // The MADT wires ISA IRQ 0 (the PIT) to IOAPIC pin 2; nothing else uses pin 2.
        if (gsi == kPicCascadePin) continue;
        e.u.irqchip.irqchip = KVM_IRQCHIP_IOAPIC;
        e.u.irqchip.pin = gsi == 0 ? kPicCascadePin : gsi;
        entries.push_back(e);
    }
    for (const auto& [gsi, msg] : msi_routes_) {
        kvm_irq_routing_entry e{};
        e.gsi = gsi;
        e.type = KVM_IRQ_ROUTING_MSI;
        e.u.msi.address_lo = static_cast<uint32_t>(msg.address);
        e.u.msi.address_hi = static_cast<uint32_t>(msg.address >> 32);
        e.u.msi.data = msg.data;
        entries.push_back(e);
    }
    KvmFlexArray<kvm_irq_routing_entry> table(entries);
    check_syscall(::ioctl(vm_.fd(), table.ioctl_number(KVM_SET_GSI_ROUTING), table.data()),
                  "KVM_SET_GSI_ROUTING");
    ++routing_pushes_;
    routes_changed_.store(false, std::memory_order_release);
}

}  // namespace mvmm
