#include "vmm/vcpu/vcpu_runner.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "base/thread_name.h"
#include "rcu/rcu.h"

namespace mvmm {

namespace {

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

std::string vcpu_name(const Vcpu& vcpu) {
    return "vCPU " + std::to_string(vcpu.index());
}

}  // namespace

VcpuRunner::VcpuRunner(std::span<const std::unique_ptr<Vcpu>> vcpus, const MmioSpace& mmio,
                       const PioSpace& pio, ExitRequest exit, BootReport* report)
    : vcpus_(vcpus),
      mmio_(mmio),
      pio_(pio),
      exit_(std::move(exit)),
      report_(report),
      diagnostics_(static_cast<unsigned>(vcpus.size())) {}

VcpuRunner::~VcpuRunner() {
    stop();
    join();
}

void VcpuRunner::start(std::chrono::seconds watchdog) {
    diagnostics_.start(watchdog);
    for (const auto& vcpu : vcpus_) threads_.emplace_back([this, &v = *vcpu] { loop(v); });
}

void VcpuRunner::stop() noexcept {
    stopping_ = true;
    diagnostics_.kick_all();
}

void VcpuRunner::join() {
    for (auto& thread : threads_) thread.join();
    threads_.clear();
}

void VcpuRunner::loop(const Vcpu& vcpu) {
    name_this_thread("vcpu" + std::to_string(vcpu.index()));
    rcu::ThreadRegistration rcu_reader;
    VcpuProbe& probe = diagnostics_.probe(vcpu.index());
    probe.attach(vcpu);  // before the first check of stopping_: a stop() from now on kicks it
    // Benchmarks time the start of guest execution from this line (tools/boot-bench).
    if (vcpu.index() == 0) {
        if (report_) report_->stamp(BootEvent::FirstKvmRun);
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
        exit_(kExitInternalError, vcpu_name(vcpu) + ": " + e.what());
    }
    probe.detach();
}

bool VcpuRunner::handle_exit(const Vcpu& vcpu) {
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
            exit_(kExitGuestCrash,
                  vcpu_name(vcpu) + ": the guest triple-faulted (KVM_EXIT_SHUTDOWN)");
            return false;
        case KVM_EXIT_SYSTEM_EVENT:
            if (run.system_event.type == KVM_SYSTEM_EVENT_RESET)
                exit_(kExitGuestReset, "the guest requested a reset");
            else
                exit_(kExitPowerOff, "the guest powered off");
            return false;
        case KVM_EXIT_FAIL_ENTRY:
            exit_(kExitGuestCrash,
                  "KVM could not enter the guest (hardware entry failure reason " +
                      std::to_string(run.fail_entry.hardware_entry_failure_reason) + ")");
            return false;
        case KVM_EXIT_INTERNAL_ERROR:
            exit_(kExitGuestCrash,
                  "KVM internal error, suberror " + std::to_string(run.internal.suberror));
            return false;
        default:
            exit_(kExitGuestCrash, "unexpected KVM exit reason " + std::to_string(run.exit_reason));
            return false;
    }
}

}  // namespace mvmm
