// The pieces of a vCPU dump (vcpu_diagnostics.h): a vCPU's last exits, its state as its own
// thread reads it from KVM, and the compact lines a dump prints, a handful per vCPU so that the
// tail of a console log holds the whole dump.
#pragma once

#include <linux/kvm.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "vmm/kvm/kvm.h"

namespace mvmm {

using SteadyTime = std::chrono::steady_clock::time_point;

// One return from KVM_RUN.
struct ExitRecord {
    SteadyTime at{};
    uint32_t reason = 0;  // KVM_EXIT_*; KVM_EXIT_INTR also for a KVM_RUN a signal ended
    uint64_t where = 0;   // the port or MMIO address, or the reason's own code
    uint32_t size = 0;    // bytes of an I/O or MMIO access
    bool write = false;
    uint32_t repeats = 1;  // kicks in a row (the watchdog's) share one record
};

// What `run` says about the exit KVM_RUN just returned; `interrupted`: it failed with EINTR.
ExitRecord describe_exit(const kvm_run& run, bool interrupted, SteadyTime at);

// The last kCapacity exits of one vCPU: its thread records, any thread reads.  Kicks in a row
// count as one, so periodic kicks do not push the exits that matter out.
class ExitRing {
  public:
    static constexpr size_t kCapacity = 16;
    void record(const ExitRecord& exit);
    std::vector<ExitRecord> last() const;  // oldest first

  private:
    mutable std::mutex mutex_;
    std::array<ExitRecord, kCapacity> records_{};
    uint64_t count_ = 0;
};

struct VcpuState {
    kvm_regs regs{};
    kvm_sregs sregs{};
    kvm_vcpu_events events{};
    kvm_mp_state mp_state{};
};

// Only on the vCPU's own thread: from another, each ioctl waits for KVM_RUN to end.
VcpuState read_vcpu_state(const Vcpu& vcpu);

// A vCPU's answer to a dump request.  `error`: why its state could not be read.
struct VcpuReport {
    std::optional<VcpuState> state{};
    std::string error{};
};

// What a dump knows about one vCPU; `report` is empty when the vCPU did not answer.
struct VcpuDumpInput {
    unsigned index = 0;
    std::optional<VcpuReport> report{};
    std::vector<ExitRecord> exits{};
    std::optional<SteadyTime> in_run_since{};  // inside KVM_RUN since then
    std::optional<SteadyTime> kicked_at{};     // the oldest kick it has not answered
};

// The lines for one vCPU, each starting "vCPU N: ", times relative to `now`.
std::vector<std::string> format_vcpu(const VcpuDumpInput& input, SteadyTime now);

}  // namespace mvmm
