#include "vmm/vcpu/vcpu_dump.h"

#include <spdlog/fmt/fmt.h>

namespace mvmm {

namespace {

const char* mp_state_name(uint32_t state) {
    constexpr const char* kNames[] = {
        "runnable",   "uninitialized", "init-received", "halted",        "sipi-received", "stopped",
        "check-stop", "operating",     "load",          "ap-reset-hold", "suspended"};
    return state < std::size(kNames) ? kNames[state] : "unknown";
}

// "#PF(14)" for the architectural exceptions, the vector alone otherwise.
std::string exception_name(uint8_t vector) {
    constexpr const char* kNames[] = {"DE", "DB", "NMI", "BP", "OF", "BR", "UD", "NM", "DF", "",
                                      "TS", "NP", "SS",  "GP", "PF", "",   "MF", "AC", "MC", "XM"};
    if (vector < std::size(kNames) && kNames[vector][0] != '\0')
        return fmt::format("#{}({})", kNames[vector], vector);
    return std::to_string(vector);
}

// Milliseconds from `then` to `now`, negative for the past: "-12.3ms".
std::string ago(SteadyTime then, SteadyTime now) {
    const double ms = std::chrono::duration<double, std::milli>(then - now).count();
    return fmt::format("{:+.1f}ms", ms);
}

std::string format_exit(const ExitRecord& e, SteadyTime now) {
    // An INTR exit is a signal that kicked the vCPU out of KVM_RUN.
    const char* name = e.reason == KVM_EXIT_INTR ? "kick" : kvm_exit_name(e.reason);
    std::string what = name ? name : fmt::format("exit{}", e.reason);
    if (e.reason == KVM_EXIT_IO || e.reason == KVM_EXIT_MMIO)
        what += fmt::format(" {} {:x}/{}", e.write ? 'w' : 'r', e.where, e.size);
    else if (e.where != 0)
        what += fmt::format(" {}", e.where);
    if (e.repeats > 1) what += fmt::format(" x{}", e.repeats);
    return what + " " + ago(e.at, now);
}

std::string format_events(const kvm_vcpu_events& e) {
    std::string exception = "none";
    if (e.exception.injected || e.exception.pending) {
        exception = fmt::format("{}{}{}", exception_name(e.exception.nr),
                                e.exception.injected ? " injected" : "",
                                e.exception.pending ? " pending" : "");
        if (e.exception.has_error_code)
            exception += fmt::format(" err={:#x}", e.exception.error_code);
    }
    const std::string interrupt =
        e.interrupt.injected
            ? fmt::format("{:#x} injected{}", e.interrupt.nr, e.interrupt.soft ? " soft" : "")
            : "none";
    return fmt::format(
        "events: exception={} interrupt={} nmi=pending:{},injected:{},masked:{} shadow={} "
        "smi_pending={} triple_fault_pending={}",
        exception, interrupt, e.nmi.pending, e.nmi.injected, e.nmi.masked, e.interrupt.shadow,
        e.smi.pending, e.triple_fault.pending);
}

// SVM INITs a vCPU that triple-faulted before KVM_RUN returns (its VMCB is undefined after the
// shutdown intercept), so after a shutdown exit the registers may be the reset state.
bool looks_reset_after_shutdown(const VcpuDumpInput& input) {
    const auto& state = input.report->state;
    return !input.exits.empty() && input.exits.back().reason == KVM_EXIT_SHUTDOWN &&
           state->regs.rip == 0xfff0 && state->sregs.cs.selector == 0xf000;
}

void add_state_lines(std::vector<std::string>& lines, const std::string& prefix,
                     const VcpuDumpInput& input) {
    const VcpuState& s = *input.report->state;
    lines.push_back(prefix + fmt::format("RIP={:016x} RSP={:016x} RFLAGS={:08x} CS={:04x} "
                                         "SS={:04x} CPL={} mp_state={}",
                                         s.regs.rip, s.regs.rsp, s.regs.rflags, s.sregs.cs.selector,
                                         s.sregs.ss.selector, s.sregs.cs.selector & 3,
                                         mp_state_name(s.mp_state.mp_state)));
    lines.push_back(prefix + fmt::format("CR0={:08x} CR2={:016x} CR3={:016x} CR4={:08x} "
                                         "EFER={:x} APIC_BASE={:x}",
                                         s.sregs.cr0, s.sregs.cr2, s.sregs.cr3, s.sregs.cr4,
                                         s.sregs.efer, s.sregs.apic_base));
    lines.push_back(prefix + format_events(s.events));
    if (looks_reset_after_shutdown(input))
        lines.push_back(prefix +
                        "these are the registers after KVM's INIT on shutdown (SVM resets a vCPU "
                        "that triple-faulted): the faulting state is lost; see its last exits");
}

}  // namespace

ExitRecord describe_exit(const kvm_run& run, bool interrupted, SteadyTime at) {
    ExitRecord e{.at = at, .reason = interrupted ? uint32_t{KVM_EXIT_INTR} : run.exit_reason};
    if (interrupted) return e;
    switch (run.exit_reason) {
        case KVM_EXIT_IO:
            e.where = run.io.port;
            e.size = run.io.size;
            e.write = run.io.direction == KVM_EXIT_IO_OUT;
            break;
        case KVM_EXIT_MMIO:
            e.where = run.mmio.phys_addr;
            e.size = run.mmio.len;
            e.write = run.mmio.is_write;
            break;
        case KVM_EXIT_FAIL_ENTRY:
            e.where = run.fail_entry.hardware_entry_failure_reason;
            break;
        case KVM_EXIT_INTERNAL_ERROR:
            e.where = run.internal.suberror;
            break;
        case KVM_EXIT_SYSTEM_EVENT:
            e.where = run.system_event.type;
            break;
        default:
            break;
    }
    return e;
}

void ExitRing::record(const ExitRecord& exit) {
    std::lock_guard lock(mutex_);
    if (count_ > 0 && exit.reason == KVM_EXIT_INTR) {
        ExitRecord& last = records_[(count_ - 1) % kCapacity];
        if (last.reason == KVM_EXIT_INTR) {
            last.at = exit.at;
            ++last.repeats;
            return;
        }
    }
    records_[count_++ % kCapacity] = exit;
}

std::vector<ExitRecord> ExitRing::last() const {
    std::lock_guard lock(mutex_);
    std::vector<ExitRecord> out;
    const uint64_t first = count_ > kCapacity ? count_ - kCapacity : 0;
    for (uint64_t i = first; i < count_; ++i) out.push_back(records_[i % kCapacity]);
    return out;
}

VcpuState read_vcpu_state(const Vcpu& vcpu) {
    return {vcpu.get_regs(), vcpu.get_sregs(), vcpu.get_vcpu_events(), vcpu.get_mp_state()};
}

std::vector<std::string> format_vcpu(const VcpuDumpInput& input, SteadyTime now) {
    const std::string prefix = fmt::format("vCPU {}: ", input.index);
    std::vector<std::string> lines;
    if (input.report && input.report->state) {
        add_state_lines(lines, prefix, input);
    } else if (input.report) {
        lines.push_back(prefix + "state unreadable: " + input.report->error);
    } else {
        // In KVM_RUN and deaf to kicks: its thread is stuck in the kernel.  Elsewhere: in mvmm
        // (its last exit says where), or not started.
        std::string why = "no answer";
        why += input.in_run_since ? ", in KVM_RUN since " + ago(*input.in_run_since, now)
                                  : ", not in KVM_RUN";
        if (input.kicked_at) why += ", kicked " + ago(*input.kicked_at, now);
        lines.push_back(prefix + why);
    }
    // Two lines of at most eight exits each, oldest first.
    constexpr size_t kPerLine = ExitRing::kCapacity / 2;
    for (size_t i = 0; i < input.exits.size(); i += kPerLine) {
        std::string line = prefix + (i == 0 ? "last exits: " : "      exits: ");
        for (size_t j = i; j < std::min(i + kPerLine, input.exits.size()); ++j)
            line += (j == i ? "" : ", ") + format_exit(input.exits[j], now);
        lines.push_back(std::move(line));
    }
    if (input.exits.empty()) lines.push_back(prefix + "no exits yet");
    return lines;
}

}  // namespace mvmm
