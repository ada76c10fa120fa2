#include "vmm/machine.h"

#include <sys/ioctl.h>

#include <spdlog/spdlog.h>
#include <cstring>
#include <fstream>
#include <iterator>

#include "devices/power/acpi_pm.h"
#include "devices/serial/uart16550.h"
#include "devices/virtio/pci/function.h"
#include "mem/guest_ram.h"
#include "rcu/rcu.h"
#include "rcu/trim.h"
#include "vmm/acpi/tables.h"
#include "vmm/boot/bzimage.h"
#include "vmm/boot/long_mode.h"
#include "vmm/cpuid.h"
#include "vmm/layout.h"

namespace mvmm {

namespace {

constexpr uint32_t kMsrMiscEnable = 0x1a0;
constexpr uint64_t kMiscEnableFastStrings = 1;

GuestMemory allocate_memory(const Config& config) {
    TerminalProgress progress;
    return allocate_guest_ram(config.memory, layout::ram_ranges(config.memory.size), config.cpus,
                              &progress);
}

devices::pci::PciLayout pci_layout(uint64_t ram_size) {
    devices::pci::PciLayout pci;
    pci.ecam_base = layout::kEcamStart;
    pci.ecam_buses = static_cast<uint16_t>(layout::kEcamSize >> 20);
    pci.mmio32 = {layout::kPciMmio32Start.value(), layout::kPciMmio32Size};
    pci.mmio64 = {layout::pci_mmio64_start(ram_size).value(), layout::kPciMmio64Size};
    pci.io = {layout::kPciIoStart, layout::kPciIoSize};
    return pci;
}

// The ACPI description of the same host bridge.
acpi::PciHostInfo pci_host_info(const devices::pci::PciLayout& pci) {
    return {pci.ecam_base,
            static_cast<uint8_t>(pci.ecam_buses - 1),
            static_cast<uint16_t>(pci.io.base),
            static_cast<uint16_t>(pci.io.last()),
            GuestAddr(pci.mmio32.base),
            GuestAddr(pci.mmio32.last()),
            GuestAddr(pci.mmio64.base),
            GuestAddr(pci.mmio64.last())};
}

// Accesses nothing claims: reads float high, writes vanish, as on a real bus.
template <class Space, class Addr>
void dispatch(const Space& space, Addr addr, uint8_t* data, uint32_t len, bool is_write) {
    if (is_write) {
        if (!space.write(addr, {data, len}))
            spdlog::trace("unhandled write at {:#x} ({} bytes)", uint64_t(addr.value()), len);
    } else if (!space.read(addr, {data, len})) {
        std::memset(data, 0xff, len);
    }
}

}  // namespace

Machine::Machine(const Config& config, std::vector<Disk> disks, BootReport* report)
    : config_(config),
      report_(report),
      vm_(kvm_),
      memory_(allocate_memory(config)),
      platform_(vm_),
      console_(config.serial),
      diagnostics_(config.cpus) {
    stamp(BootEvent::RamReady);
    memory_.register_with_kvm(vm_.fd());
    rcu::set_trim_policy(config.trim);
    setup_devices();
    attach_disks(std::move(disks));
    stamp(BootEvent::DevicesReady);
    for (unsigned i = 0; i < config.cpus; ++i) vcpus_.push_back(std::make_unique<Vcpu>(vm_, i));
    load_guest();
    stamp(BootEvent::GuestLoaded);
}

Machine::~Machine() {
    stopping_ = true;
    diagnostics_.kick_all();
}

void Machine::setup_devices() {
    auto on_power = [this](devices::PowerEvent e) {
        if (e == devices::PowerEvent::PowerOff)
            request_exit(kExitPowerOff, "the guest powered off");
        else
            request_exit(kExitGuestReset, "the guest requested a reset");
    };
    devices::Uart16550::TransmitTap tap;
    if (report_) tap = [report = report_](uint8_t byte) { report->serial_byte(byte); };
    uart_ = std::make_shared<devices::Uart16550>(platform_, acpi::kCom1Irq, console_.output_fd(),
                                                 std::move(tap));
    pio_.add(PioPort(acpi::kCom1Port), 8, uart_, "com1");
    pio_.add(PioPort(acpi::kPm1EventPort), 8,
             std::make_shared<devices::AcpiPm1>(acpi::kS5SleepType, on_power), "acpi-pm1");
    // 0xCF9 shares a dword with CONFIG_ADDRESS: the host bridge forwards it.
    pci_ = std::make_unique<devices::pci::PciHostBridge>(
        pci_layout(memory_.total_size()), mmio_, pio_,
        std::make_shared<devices::ResetPort>(acpi::kResetValue, on_power));
}

void Machine::attach_disks(std::vector<Disk> disks) {
    using devices::virtio::blk::DiskBus;
    for (Disk& disk : disks) {
        diagnostics_.add_device(disk.name, *disk.counters);
        auto function = std::make_shared<devices::virtio::pci::VirtioPciFunction>(
            std::move(disk.device), platform_, memory_);
        if (disk.bus == DiskBus::Root)
            pci_->attach(function, devices::pci::RootBusSlot{});
        else
            pci_->attach(function, devices::pci::NewRootPort{});
    }
    for (unsigned i = 0; i < config_.empty_root_ports; ++i) pci_->add_empty_root_port();
}

void Machine::load_guest() {
    const auto kernel_file = read_file(config_.kernel, "kernel");
    const auto image = boot::parse_bzimage(kernel_file);
    std::vector<uint8_t> initrd;
    if (!config_.initrd.empty()) initrd = read_file(config_.initrd, "initrd");

    const acpi::MachineInfo info{config_.cpus, layout::kIoapic, layout::kLapic,
                                 pci_host_info(pci_->layout())};
    const auto tables = acpi::build_tables(info, layout::kAcpiStart);
    if (!memory_.write_bytes(tables.base, tables.bytes))
        throw boot::BootError("the ACPI tables do not fit below 1 MiB");

    std::vector<std::pair<uint64_t, uint64_t>> ram;
    for (const auto& r : memory_.regions()) ram.emplace_back(r.base.value(), r.size());
    boot::write_long_mode_tables(memory_);
    const auto boot_info = boot::load_linux(
        memory_, {image, initrd, config_.cmdline, boot::build_e820(ram), tables.rsdp.value()});
    for (unsigned i = 0; i < vcpus_.size(); ++i)
        setup_vcpu(*vcpus_[i], i, boot_info.entry, boot_info.zero_page);
}

void Machine::setup_vcpu(const Vcpu& vcpu, unsigned index, GuestAddr entry, GuestAddr zero_page) {
    vcpu.set_cpuid(cpuid_for_vcpu(kvm_.supported_cpuid(), index, config_.cpus));
    const kvm_msr_entry msrs[] = {{kMsrMiscEnable, 0, kMiscEnableFastStrings}};
    vcpu.set_msrs(msrs);
    // LINT0 delivers the PIC's ExtINT, LINT1 NMIs, as firmware leaves them.
    auto lapic = vcpu.get_lapic();
    auto set_lvt = [&](size_t offset, uint32_t delivery_mode) {
        uint32_t v;
        std::memcpy(&v, lapic.regs + offset, 4);
        v = (v & ~0x700u & ~(1u << 16)) | (delivery_mode << 8);
        std::memcpy(lapic.regs + offset, &v, 4);
    };
    set_lvt(0x350, 7);
    set_lvt(0x360, 4);
    vcpu.set_lapic(lapic);
    vcpu.set_fpu(boot::initial_fpu());
    // Application processors wait for INIT/SIPI from the boot CPU; only CPU 0 starts here.
    if (index != 0) return;
    auto sregs = vcpu.get_sregs();
    boot::set_long_mode_sregs(sregs);
    vcpu.set_sregs(sregs);
    vcpu.set_regs(boot::long_mode_entry_regs(entry, zero_page));
}

nlohmann::json Machine::query_status() {
    std::lock_guard lock(exit_mutex_);
    auto uptime = std::chrono::steady_clock::now() - started_;
    return {{"status", exit_code_ ? "stopping" : "running"},
            {"cpus", config_.cpus},
            {"disks", config_.disks.blk.size()},
            {"scsi_controllers", config_.disks.scsi.size()},
            {"memory_bytes", memory_.total_size()},
            {"uptime_ms", std::chrono::duration_cast<std::chrono::milliseconds>(uptime).count()}};
}

void Machine::quit() {
    request_exit(kExitPowerOff, "quit requested on the management socket");
}

ExitFigures Machine::exit_figures() const {
    return {read_process_figures(),
            MachineFigures{memory_.resident_bytes(), mmio_.stats(), pio_.stats(), exits_.by_kind(),
                           platform_.routing_pushes()}};
}

void Machine::request_exit(ExitCode code, const std::string& reason) {
    {
        std::lock_guard lock(exit_mutex_);
        if (exit_code_) return;
        exit_code_ = code;
    }
    if (report_) {
        report_->stamp(BootEvent::GuestStopped);
        report_->stopping(reason);
    }
    if (code == kExitPowerOff || code > kExitSignalBase)
        spdlog::info("{}", reason);
    else
        spdlog::error("{} (exit code {})", reason, int(code));
    stopping_ = true;
    diagnostics_.kick_all();
    exit_cv_.notify_all();
}

int Machine::run() {
    console_.start([uart = uart_](std::span<const uint8_t> bytes) { uart->receive(bytes); });
    diagnostics_.start(std::chrono::seconds(config_.vcpu_watchdog));
    {
        // Start all vCPU threads while holding the lock, so request_exit() kicks them all.
        std::lock_guard lock(exit_mutex_);
        for (auto& vcpu : vcpus_) vcpu_threads_.emplace_back([this, &v = *vcpu] { vcpu_loop(v); });
    }
    std::unique_lock lock(exit_mutex_);
    exit_cv_.wait(lock, [&] { return exit_code_.has_value(); });
    lock.unlock();
    if (*exit_code_ == kExitGuestCrash)
        diagnostics_.dump("the guest crashed", spdlog::level::err, std::chrono::seconds(2));
    for (auto& t : vcpu_threads_) t.join();
    vcpu_threads_.clear();
    rcu::drain();  // the address-space updates of this boot, freed and trimmed per the policy
    ExitFigures figures = exit_figures();
    spdlog::info("exit stats: {}", exit_stats_line(figures));
    if (report_) report_->set_figures(std::move(figures));
    return *exit_code_;
}

void Machine::vcpu_loop(const Vcpu& vcpu) {
    rcu::ThreadRegistration rcu_reader;
    VcpuProbe& probe = diagnostics_.probe(vcpu.index());
    probe.attach(vcpu);
    // Benchmarks time the start of guest execution from this line (tools/boot-bench).
    if (vcpu.index() == 0) {
        stamp(BootEvent::FirstKvmRun);
        spdlog::debug("vCPU 0: first KVM_RUN");
    }
    try {
        while (!stopping_) {
            if (probe.run() < 0) {
                if (errno == EINTR || errno == EAGAIN) continue;
                throw_errno("KVM_RUN");
            }
            if (!handle_exit(vcpu)) break;
        }
    } catch (const std::exception& e) {
        request_exit(kExitInternalError,
                     std::string("vCPU ") + std::to_string(vcpu.index()) + ": " + e.what());
    }
    probe.detach();
}

bool Machine::handle_exit(const Vcpu& vcpu) {
    kvm_run& run = vcpu.run();
    exits_.count(run.exit_reason);
    switch (run.exit_reason) {
        case KVM_EXIT_IO: {
            auto* data = reinterpret_cast<uint8_t*>(&run) + run.io.data_offset;
            for (uint32_t i = 0; i < run.io.count; ++i, data += run.io.size)
                dispatch(pio_, PioPort(run.io.port), data, run.io.size,
                         run.io.direction == KVM_EXIT_IO_OUT);
            return true;
        }
        case KVM_EXIT_MMIO:
            dispatch(mmio_, GuestAddr(run.mmio.phys_addr), run.mmio.data, run.mmio.len,
                     run.mmio.is_write);
            return true;
        case KVM_EXIT_INTR:
            return true;
        case KVM_EXIT_SHUTDOWN:
            request_exit(kExitGuestCrash, "vCPU " + std::to_string(vcpu.index()) +
                                              ": the guest triple-faulted (KVM_EXIT_SHUTDOWN)");
            return false;
        case KVM_EXIT_SYSTEM_EVENT:
            if (run.system_event.type == KVM_SYSTEM_EVENT_RESET)
                request_exit(kExitGuestReset, "the guest requested a reset");
            else
                request_exit(kExitPowerOff, "the guest powered off");
            return false;
        case KVM_EXIT_FAIL_ENTRY:
            request_exit(kExitGuestCrash,
                         "KVM could not enter the guest (hardware entry failure reason " +
                             std::to_string(run.fail_entry.hardware_entry_failure_reason) + ")");
            return false;
        case KVM_EXIT_INTERNAL_ERROR:
            request_exit(kExitGuestCrash,
                         "KVM internal error, suberror " + std::to_string(run.internal.suberror));
            return false;
        default:
            request_exit(kExitGuestCrash,
                         "unexpected KVM exit reason " + std::to_string(run.exit_reason));
            return false;
    }
}

}  // namespace mvmm
