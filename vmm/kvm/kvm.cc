#include "vmm/kvm/kvm.h"

#include <fcntl.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <memory>
#include <stdexcept>

namespace mvmm {

namespace {

// The set-up calls (KVM_RUN is the vCPU's own) are restarted when a signal interrupts them, as
// QEMU does for KVM_CREATE_VM: its mmu_notifier_register gives up with EINTR while the thread
// has a signal or task work pending, such as the work io_uring's ring teardown queues on the
// thread that made the ring.
template <class... Args>
long kvm_ioctl(int fd, unsigned long request, const char* name, Args... args) {
    long ret;
    do {
        ret = ::ioctl(fd, request, args...);
    } while (ret < 0 && errno == EINTR);
    if (ret < 0) throw_errno(name);
    return ret;
}

// Capabilities mvmm cannot work without, and what each is for.
struct RequiredCap {
    long cap;
    const char* what;
};
constexpr RequiredCap kRequiredCaps[] = {
    {KVM_CAP_IRQCHIP, "in-kernel interrupt controller"},
    {KVM_CAP_IRQFD, "irqfd"},
    {KVM_CAP_IOEVENTFD, "ioeventfd"},
    {KVM_CAP_IRQ_ROUTING, "GSI routing"},
    {KVM_CAP_PIT2, "in-kernel PIT"},
    {KVM_CAP_SET_TSS_ADDR, "TSS address"},
    {KVM_CAP_USER_MEMORY, "user memory slots"},
    {KVM_CAP_EXT_CPUID, "CPUID configuration"},
};

}  // namespace

Kvm::Kvm() {
    int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (fd < 0) throw_errno("cannot open /dev/kvm");
    fd_ = Fd(fd);
    if (kvm_ioctl(fd, KVM_GET_API_VERSION, "KVM_GET_API_VERSION", 0) != KVM_API_VERSION)
        throw std::runtime_error("/dev/kvm speaks an unsupported KVM API version");
    for (const auto& c : kRequiredCaps)
        if (check_extension(c.cap) <= 0)
            throw std::runtime_error(std::string("KVM lacks a required capability: ") + c.what);
}

int Kvm::check_extension(long cap) const {
    return static_cast<int>(::ioctl(fd_.get(), KVM_CHECK_EXTENSION, cap));
}

std::vector<kvm_cpuid_entry2> Kvm::supported_cpuid() const {
    constexpr size_t kMaxEntries = 256;
    KvmFlexArray<kvm_cpuid_entry2> cpuid(kMaxEntries);
    kvm_ioctl(fd_.get(), cpuid.ioctl_number(KVM_GET_SUPPORTED_CPUID), "KVM_GET_SUPPORTED_CPUID",
              cpuid.data());
    return cpuid.entries();
}

Vm::Vm(const Kvm& kvm) : kvm_(kvm) {
    fd_ = Fd(static_cast<int>(kvm_ioctl(kvm.fd(), KVM_CREATE_VM, "KVM_CREATE_VM", 0)));
    // Three pages just below the 4 GiB BIOS area, which the memory map keeps free of RAM.
    kvm_ioctl(fd(), KVM_SET_TSS_ADDR, "KVM_SET_TSS_ADDR", 0xfffbd000UL);
    uint64_t identity_map = 0xfffbc000;
    kvm_ioctl(fd(), KVM_SET_IDENTITY_MAP_ADDR, "KVM_SET_IDENTITY_MAP_ADDR", &identity_map);
    kvm_ioctl(fd(), KVM_CREATE_IRQCHIP, "KVM_CREATE_IRQCHIP", 0);
    kvm_pit_config pit{};
    pit.flags = KVM_PIT_SPEAKER_DUMMY;
    kvm_ioctl(fd(), KVM_CREATE_PIT2, "KVM_CREATE_PIT2", &pit);
}

void Vm::set_irq_line(uint32_t gsi, bool level) const {
    kvm_irq_level irq{};
    irq.irq = gsi;
    irq.level = level ? 1 : 0;
    kvm_ioctl(fd(), KVM_IRQ_LINE, "KVM_IRQ_LINE", &irq);
}

Vcpu::Vcpu(const Vm& vm, unsigned index) : index_(index) {
    fd_ = Fd(static_cast<int>(kvm_ioctl(vm.fd(), KVM_CREATE_VCPU, "KVM_CREATE_VCPU", index)));
    auto size = kvm_ioctl(vm.kvm().fd(), KVM_GET_VCPU_MMAP_SIZE, "KVM_GET_VCPU_MMAP_SIZE", 0);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_.get(), 0);
    if (p == MAP_FAILED) throw_errno("mmap of the vCPU run area");
    run_ = Mapping(p, size);
}

void Vcpu::set_cpuid(std::span<const kvm_cpuid_entry2> entries) const {
    KvmFlexArray<kvm_cpuid_entry2> cpuid(entries);
    kvm_ioctl(fd(), cpuid.ioctl_number(KVM_SET_CPUID2), "KVM_SET_CPUID2", cpuid.data());
}

kvm_sregs Vcpu::get_sregs() const {
    kvm_sregs s{};
    kvm_ioctl(fd(), KVM_GET_SREGS, "KVM_GET_SREGS", &s);
    return s;
}
void Vcpu::set_sregs(const kvm_sregs& s) const {
    kvm_ioctl(fd(), KVM_SET_SREGS, "KVM_SET_SREGS", &s);
}
kvm_regs Vcpu::get_regs() const {
    kvm_regs r{};
    kvm_ioctl(fd(), KVM_GET_REGS, "KVM_GET_REGS", &r);
    return r;
}
void Vcpu::set_regs(const kvm_regs& r) const {
    kvm_ioctl(fd(), KVM_SET_REGS, "KVM_SET_REGS", &r);
}
kvm_vcpu_events Vcpu::get_vcpu_events() const {
    kvm_vcpu_events e{};
    kvm_ioctl(fd(), KVM_GET_VCPU_EVENTS, "KVM_GET_VCPU_EVENTS", &e);
    return e;
}
kvm_mp_state Vcpu::get_mp_state() const {
    kvm_mp_state m{};
    kvm_ioctl(fd(), KVM_GET_MP_STATE, "KVM_GET_MP_STATE", &m);
    return m;
}
void Vcpu::set_fpu(const kvm_fpu& f) const {
    kvm_ioctl(fd(), KVM_SET_FPU, "KVM_SET_FPU", &f);
}

void Vcpu::set_msrs(std::span<const kvm_msr_entry> msrs) const {
    KvmFlexArray<kvm_msr_entry> list(msrs);
    auto set = kvm_ioctl(fd(), list.ioctl_number(KVM_SET_MSRS), "KVM_SET_MSRS", list.data());
    if (static_cast<size_t>(set) != msrs.size())
        throw std::runtime_error("KVM_SET_MSRS set only " + std::to_string(set) + " MSRs");
}

kvm_lapic_state Vcpu::get_lapic() const {
    kvm_lapic_state s{};
    kvm_ioctl(fd(), KVM_GET_LAPIC, "KVM_GET_LAPIC", &s);
    return s;
}
void Vcpu::set_lapic(const kvm_lapic_state& s) const {
    kvm_ioctl(fd(), KVM_SET_LAPIC, "KVM_SET_LAPIC", &s);
}

const char* kvm_exit_name(uint32_t reason) {
    switch (reason) {
        case KVM_EXIT_IO:
            return "io";
        case KVM_EXIT_MMIO:
            return "mmio";
        case KVM_EXIT_INTR:
            return "intr";
        case KVM_EXIT_HLT:
            return "hlt";
        case KVM_EXIT_SHUTDOWN:
            return "shutdown";
        case KVM_EXIT_SYSTEM_EVENT:
            return "system_event";
        case KVM_EXIT_FAIL_ENTRY:
            return "fail_entry";
        case KVM_EXIT_INTERNAL_ERROR:
            return "internal_error";
        case KVM_EXIT_IRQ_WINDOW_OPEN:
            return "irq_window_open";
        case KVM_EXIT_DEBUG:
            return "debug";
        default:
            return nullptr;
    }
}

}  // namespace mvmm
