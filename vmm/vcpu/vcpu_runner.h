// The vCPU threads.  Each runs KVM_RUN on its vCPU and decodes the exits: port and MMIO accesses
// go to the address spaces (devices answer on this thread; their real work runs on I/O threads),
// and an exit that ends the guest (poweroff, reset, triple fault, a state KVM cannot run) is
// reported through the ExitRequest, after which the thread stops.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "devices/bus/address_space.h"
#include "vmm/exit_code.h"
#include "vmm/kvm/kvm.h"
#include "vmm/report/boot_report.h"
#include "vmm/report/exit_figures.h"
#include "vmm/vcpu/vcpu_diagnostics.h"

namespace mvmm {

class VcpuRunner {
  public:
    using ExitRequest = std::function<void(ExitCode, const std::string& reason)>;

    // The vCPUs and spaces must outlive the runner; `report` (optional) hears of the first
    // KVM_RUN.
    VcpuRunner(std::span<const std::unique_ptr<Vcpu>> vcpus, const MmioSpace& mmio,
               const PioSpace& pio, ExitRequest exit, BootReport* report);
    ~VcpuRunner();  // stops and joins the threads
    VcpuRunner(const VcpuRunner&) = delete;
    VcpuRunner& operator=(const VcpuRunner&) = delete;

    VcpuDiagnostics& diagnostics() noexcept { return diagnostics_; }
    const VmExitCounts& exits() const noexcept { return exits_; }

    // Starts the diagnostics thread (its watchdog: `watchdog` seconds, 0 for none) and one
    // thread per vCPU.
    void start(std::chrono::seconds watchdog);
    // Every vCPU leaves KVM_RUN and its loop; any thread.
    void stop() noexcept;
    void join();

  private:
    void loop(const Vcpu& vcpu);
    bool handle_exit(const Vcpu& vcpu);  // false: stop this vCPU

    std::span<const std::unique_ptr<Vcpu>> vcpus_;
    const MmioSpace& mmio_;
    const PioSpace& pio_;
    ExitRequest exit_;
    BootReport* report_;
    VmExitCounts exits_;
    std::atomic<bool> stopping_{false};
    VcpuDiagnostics diagnostics_;  // kicks and dumps; outlives the vCPU threads
    std::vector<std::jthread> threads_;
};

}  // namespace mvmm
