// Thin RAII wrappers over the KVM API: the system fd, a VM and its vCPUs.
#pragma once

#include <linux/kvm.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/mapping.h"

namespace mvmm {

// An ioctl argument made of an 8-byte header {u32 count; u32 flags/pad} and a flexible array
// of entries (kvm_cpuid2, kvm_msrs, kvm_irq_routing).  The kernel headers declare the array
// with __DECLARE_FLEX_ARRAY, which in C++ pads the struct: both sizeof() and the ioctl numbers
// derived from it are wrong there, so the C layout is built by hand.
template <class Entry>
class KvmFlexArray {
  public:
    static constexpr size_t kHeaderSize = 8;

    explicit KvmFlexArray(std::span<const Entry> entries)
        : storage_(kHeaderSize + entries.size() * sizeof(Entry)) {
        uint32_t count = static_cast<uint32_t>(entries.size());
        std::memcpy(storage_.data(), &count, sizeof count);
        std::memcpy(storage_.data() + kHeaderSize, entries.data(), entries.size_bytes());
    }
    explicit KvmFlexArray(size_t capacity) : KvmFlexArray(std::vector<Entry>(capacity)) {}

    void* data() noexcept { return storage_.data(); }
    uint32_t count() const noexcept {
        uint32_t count;
        std::memcpy(&count, storage_.data(), sizeof count);
        return count;
    }
    std::vector<Entry> entries() const {
        std::vector<Entry> out(count());
        std::memcpy(out.data(), storage_.data() + kHeaderSize, out.size() * sizeof(Entry));
        return out;
    }
    // `request` with its size field set to the C header size.
    static constexpr unsigned long ioctl_number(unsigned long request) {
        return (request & ~(static_cast<unsigned long>(_IOC_SIZEMASK) << _IOC_SIZESHIFT)) |
               (kHeaderSize << _IOC_SIZESHIFT);
    }

  private:
    std::vector<uint8_t> storage_;
};

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
    kvm_regs get_regs() const;
    void set_regs(const kvm_regs& regs) const;
    kvm_vcpu_events get_vcpu_events() const;
    kvm_mp_state get_mp_state() const;
    void set_fpu(const kvm_fpu& fpu) const;
    void set_msrs(std::span<const kvm_msr_entry> msrs) const;
    kvm_lapic_state get_lapic() const;
    void set_lapic(const kvm_lapic_state& lapic) const;

  private:
    unsigned index_;
    Fd fd_;
    Mapping run_;
};

// The snake_case name of a KVM exit reason ("io", "system_event", ...), as --report and the exit
// stats spell it; nullptr for a reason without one.
const char* kvm_exit_name(uint32_t reason);

}  // namespace mvmm
