// Thin RAII wrappers over the KVM API: the system fd, a VM and its vCPUs.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mem/fd.h"
#include "mem/mapping.h"

namespace mvmm {

class Kvm {
  public:
    Kvm();  // opens /dev/kvm and checks the API version and the capabilities mvmm needs
    int fd() const noexcept { return fd_.get(); }
    int check_extension(long cap) const;
    std::vector<kvm_cpuid_entry2> supported_cpuid() const;

  private:
    Fd fd_;
};

class Vcpu;

class Vm {
  public:
    explicit Vm(const Kvm& kvm);
    int fd() const noexcept { return fd_.get(); }
    const Kvm& kvm() const noexcept { return kvm_; }

    // Raises or lowers a legacy interrupt line (IOAPIC/PIC pin).
    void set_irq_line(uint32_t gsi, bool level) const;

  private:
    const Kvm& kvm_;
    Fd fd_;
};

class Vcpu {
  public:
    Vcpu(const Vm& vm, unsigned index);
    int fd() const noexcept { return fd_.get(); }
    unsigned index() const noexcept { return index_; }
    kvm_run& run() const noexcept { return *reinterpret_cast<kvm_run*>(run_.bytes().data()); }

    void set_cpuid(std::span<const kvm_cpuid_entry2> entries) const;
    kvm_sregs get_sregs() const;
    void set_sregs(const kvm_sregs& sregs) const;
    void set_regs(const kvm_regs& regs) const;
    void set_fpu(const kvm_fpu& fpu) const;
    void set_msrs(std::span<const kvm_msr_entry> msrs) const;
    kvm_lapic_state get_lapic() const;
    void set_lapic(const kvm_lapic_state& lapic) const;

  private:
    unsigned index_;
    Fd fd_;
    Mapping run_;
};

}  // namespace mvmm
