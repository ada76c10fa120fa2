// An mvmm machine: guest RAM, the KVM VM with its irqchip, the legacy devices, the boot
// state of the vCPUs and one thread per vCPU.  run() returns the exit code.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "devices/pci/host_bridge.h"
#include "mem/address_space.h"
#include "mem/guest_memory.h"
#include "vmm/api/handler.h"
#include "vmm/boot_report.h"
#include "vmm/config.h"
#include "vmm/console.h"
#include "vmm/disks.h"
#include "vmm/exit_code.h"
#include "vmm/exit_figures.h"
#include "vmm/kvm.h"
#include "vmm/kvm_platform.h"
#include "vmm/vcpu_diagnostics.h"

namespace mvmm {

namespace devices {
class Uart16550;
}

class Machine : public api::ApiHandler {
  public:
    // `disks` are opened already; the machine puts them on PCI and owns them from now on.
    // `report`, when given, hears of the boot's phases, console and exit figures.
    Machine(const Config& config, std::vector<Disk> disks, BootReport* report = nullptr);
    ~Machine();
    Machine(const Machine&) = delete;
    Machine& operator=(const Machine&) = delete;

    // Runs the guest until it powers off, resets or crashes; returns the exit code.
    int run();

    // Ends the machine with `code`; the first request wins.  Callable from any thread.
    void request_exit(ExitCode code, const std::string& reason);

    // The management socket's view.
    nlohmann::json query_status() override;
    void quit() override;

    // At exit: memory, trims, address-space rebuilds, VM exits (the `exit stats` line).
    ExitFigures exit_figures() const;

  private:
    void setup_devices();
    void attach_disks(std::vector<Disk> disks);
    void load_guest();
    void setup_vcpu(const Vcpu& vcpu, unsigned index, GuestAddr entry, GuestAddr zero_page);
    void vcpu_loop(const Vcpu& vcpu);
    bool handle_exit(const Vcpu& vcpu);  // false: stop this vCPU
    void stamp(BootEvent event) const noexcept {
        if (report_) report_->stamp(event);
    }

    const Config& config_;
    BootReport* report_;
    VmExitCounts exits_;
    Kvm kvm_;
    Vm vm_;
    GuestMemory memory_;
    KvmPlatform platform_;
    MmioSpace mmio_;
    PioSpace pio_;
    Console console_;
    std::shared_ptr<devices::Uart16550> uart_;
    std::unique_ptr<devices::pci::PciHostBridge> pci_;
    VcpuDiagnostics diagnostics_;  // kicks and dumps; outlives the vCPU threads
    std::vector<std::unique_ptr<Vcpu>> vcpus_;
    std::vector<std::jthread> vcpu_threads_;

    std::mutex exit_mutex_;
    std::condition_variable exit_cv_;
    std::optional<ExitCode> exit_code_;
    std::atomic<bool> stopping_{false};
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace mvmm
