// vCPU dumps: the exit ring and the dump's lines natively, and kicks, dumps, SIGUSR2 and the
// watchdog with a real vCPU on this machine's /dev/kvm.  Our PVM /dev/kvm cannot run a Linux
// guest, but it runs real-mode code through KVM's emulator: enough for a vCPU that does port
// I/O, halts, or triple-faults.
#include "vmm/vcpu/vcpu_diagnostics.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <unistd.h>

#include <sstream>
#include <thread>

#include "mem/guest_memory.h"

namespace mvmm {
namespace {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

ExitRecord io_exit(uint16_t port, SteadyTime at) {
    return {.at = at, .reason = KVM_EXIT_IO, .where = port, .size = 1, .write = true};
}

TEST(ExitRing, KeepsTheLastSixteenOldestFirst) {
    ExitRing ring;
    EXPECT_TRUE(ring.last().empty());
    const auto t = steady_clock::now();
    for (uint16_t port = 0; port < 20; ++port) ring.record(io_exit(port, t));
    const auto last = ring.last();
    ASSERT_EQ(last.size(), 16u);
    EXPECT_EQ(last.front().where, 4u);
    EXPECT_EQ(last.back().where, 19u);
}

TEST(ExitRing, KicksInARowShareOneRecord) {
    ExitRing ring;
    const auto t = steady_clock::now();
    ring.record(io_exit(0x80, t));
    for (int i = 0; i < 40; ++i)
        ring.record({.at = t + std::chrono::milliseconds(i), .reason = KVM_EXIT_INTR});
    ring.record(io_exit(0x81, t));
    const auto last = ring.last();
    ASSERT_EQ(last.size(), 3u);
    EXPECT_EQ(last[1].repeats, 40u);
    EXPECT_EQ(last[1].at, t + std::chrono::milliseconds(39));
    VcpuDumpInput input;
    input.exits = last;
    const auto lines = format_vcpu(input, t + 100ms);
    EXPECT_NE(lines.back().find("kick x40 -61.0ms"), std::string::npos) << lines.back();
}

TEST(ExitRing, DescribesIoMmioAndKicks) {
    kvm_run run{};
    run.exit_reason = KVM_EXIT_MMIO;
    run.mmio.phys_addr = 0xfebf'4000;
    run.mmio.len = 4;
    run.mmio.is_write = 1;
    const auto t = steady_clock::now();
    const auto mmio = describe_exit(run, false, t);
    EXPECT_EQ(mmio.reason, uint32_t{KVM_EXIT_MMIO});
    EXPECT_EQ(mmio.where, 0xfebf'4000u);
    EXPECT_EQ(mmio.size, 4u);
    EXPECT_TRUE(mmio.write);
    EXPECT_EQ(describe_exit(run, true, t).reason, uint32_t{KVM_EXIT_INTR});
}

std::string joined(const std::vector<std::string>& lines) {
    std::string all;
    for (const auto& line : lines) all += line + "\n";
    return all;
}

TEST(FormatVcpu, ShowsRegistersEventsAndExitsInAFewLines) {
    const auto now = steady_clock::now();
    VcpuState state;
    state.regs.rip = 0xffff'ffff'8100'1234;
    state.regs.rflags = 0x10046;
    state.sregs.cs.selector = 0x10;
    state.sregs.cr3 = 0x260a000;
    state.sregs.efer = 0xd01;
    state.events.exception.injected = 1;
    state.events.exception.nr = 14;
    state.events.exception.has_error_code = 1;
    state.events.exception.error_code = 2;
    state.events.interrupt.injected = 1;
    state.events.interrupt.nr = 0xec;
    state.mp_state.mp_state = KVM_MP_STATE_HALTED;
    VcpuDumpInput input{.index = 1, .report = VcpuReport{.state = state}};
    for (int i = 0; i < 16; ++i) input.exits.push_back(io_exit(0x3f8, now - 12ms));
    const auto lines = format_vcpu(input, now);
    EXPECT_LE(lines.size(), 6u);
    const std::string all = joined(lines);
    for (const char* expected :
         {"vCPU 1: RIP=ffffffff81001234", "RFLAGS=00010046", "CS=0010", "mp_state=halted",
          "CR3=000000000260a000", "EFER=d01", "exception=#PF(14) injected err=0x2",
          "interrupt=0xec injected", "last exits: io w 3f8/1 -12.0ms"})
        EXPECT_NE(all.find(expected), std::string::npos) << expected << " in\n" << all;
}

TEST(FormatVcpu, SaysWhyAVcpuDidNotAnswer) {
    const auto now = steady_clock::now();
    const VcpuDumpInput stuck{.index = 0, .in_run_since = now - 5s, .kicked_at = now - 2s};
    const std::string all = joined(format_vcpu(stuck, now));
    EXPECT_NE(all.find("vCPU 0: no answer, in KVM_RUN since -5000.0ms, kicked -2000.0ms"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("no exits yet"), std::string::npos);
}

TEST(FormatVcpu, WarnsWhenSvmResetTheRegistersOfATripleFault) {
    const auto now = steady_clock::now();
    VcpuState reset;
    reset.regs.rip = 0xfff0;
    reset.sregs.cs.selector = 0xf000;
    VcpuDumpInput input{.index = 0, .report = VcpuReport{.state = reset}};
    input.exits.push_back({.at = now, .reason = KVM_EXIT_SHUTDOWN});
    EXPECT_NE(joined(format_vcpu(input, now)).find("the faulting state is lost"),
              std::string::npos);
}

// Guest RAM at 0 and one vCPU at 0x1000 running `code`, in real mode or in flat 32-bit
// protected mode without paging.
class TinyGuest {
  public:
    explicit TinyGuest(std::span<const uint8_t> code, bool protected_mode = false)
        : vm_(kvm_), memory_(ram()), vcpu_(vm_, 0) {
        memory_.register_with_kvm(vm_.fd());
        if (!memory_.write_bytes(GuestAddr(0x1000), code)) throw std::runtime_error("code");
        auto sregs = vcpu_.get_sregs();
        sregs.cs.base = 0;
        sregs.cs.selector = 0;
        if (protected_mode) {
            // Flat 32-bit code, no paging, and an empty IDT: no exception can be delivered.
            sregs.cr0 |= 1;
            sregs.cs = {.base = 0,
                        .limit = 0xffff'ffff,
                        .selector = 8,
                        .type = 0xb,
                        .present = 1,
                        .dpl = 0,
                        .db = 1,
                        .s = 1,
                        .l = 0,
                        .g = 1,
                        .avl = 0,
                        .unusable = 0,
                        .padding = 0};
            kvm_segment data = sregs.cs;
            data.selector = 0x10;
            data.type = 3;
            sregs.ds = sregs.es = sregs.ss = sregs.fs = sregs.gs = data;
            sregs.idt = {.base = 0, .limit = 0, .padding = {}};
        }
        vcpu_.set_sregs(sregs);
        kvm_regs regs{};
        regs.rip = 0x1000;
        regs.rflags = 2;
        vcpu_.set_regs(regs);
    }
    const Vcpu& vcpu() const { return vcpu_; }

    // What Machine::vcpu_loop does, without devices: runs on through I/O exits and kicks until
    // another exit or `stop`; returns the last exit reason.
    static uint32_t run(VcpuProbe& probe, const Vcpu& vcpu, const std::atomic<bool>& stop) {
        probe.attach(vcpu);
        uint32_t reason = KVM_EXIT_INTR;
        while (!stop) {
            if (probe.run() < 0) {
                if (errno == EINTR) continue;
                throw_errno("KVM_RUN");
            }
            reason = vcpu.run().exit_reason;
            if (reason != KVM_EXIT_IO) break;
        }
        probe.detach();
        return reason;
    }

  private:
    static std::vector<RamRegion> ram() {
        std::vector<RamRegion> regions;
        regions.push_back(RamRegion{GuestAddr(0), Mapping::anonymous(1 << 20)});
        return regions;
    }
    Kvm kvm_;
    Vm vm_;
    GuestMemory memory_;
    Vcpu vcpu_;
};

// out 0x80, al; hlt; jmp back to the hlt
constexpr uint8_t kOutThenHalt[] = {0xb0, 0x42, 0xe6, 0x80, 0xf4, 0xeb, 0xfd};

// ud2 in protected mode with an empty IDT: neither #UD nor #GP nor #DF can be delivered, a
// triple fault.  (In real mode KVM's emulator ignores the IVT's limit and runs on.)
constexpr uint8_t kUd2[] = {0x0f, 0x0b};

class VcpuDiagnosticsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        logger_ = std::make_shared<spdlog::logger>(
            "test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log_));
        logger_->set_pattern("%l: %v");
        previous_ = spdlog::default_logger();
        spdlog::set_default_logger(logger_);
    }
    void TearDown() override { spdlog::set_default_logger(previous_); }

    // nullptr when /dev/kvm cannot be used at all; kvm_problem_ says why.
    std::unique_ptr<TinyGuest> guest(std::span<const uint8_t> code, bool protected_mode = false) {
        try {
            Kvm kvm;
        } catch (const std::exception& e) {
            kvm_problem_ = e.what();
            return nullptr;
        }
        return std::make_unique<TinyGuest>(code, protected_mode);
    }
    std::string log() {
        logger_->flush();
        return log_.str();
    }
    bool logged(const std::string& text) { return log().find(text) != std::string::npos; }

    std::string kvm_problem_;
    std::ostringstream log_;
    std::shared_ptr<spdlog::logger> logger_;
    std::shared_ptr<spdlog::logger> previous_;
};

#define SKIP_WITHOUT_KVM(guest) \
    if (!(guest)) GTEST_SKIP() << "no vCPU to test with: " << kvm_problem_

TEST_F(VcpuDiagnosticsTest, DumpKicksAHaltedVcpuForItsStateAndLetsItRunOn) {
    auto g = guest(kOutThenHalt);
    SKIP_WITHOUT_KVM(g);
    VcpuDiagnostics diagnostics(1);
    std::atomic<bool> stop{false};
    std::jthread vcpu([&] { TinyGuest::run(diagnostics.probe(0), g->vcpu(), stop); });
    // The emulator is slow: wait until the vCPU halted (it answers a request with its state).
    SteadyTime deadline = steady_clock::now() + 20s;
    for (;;) {
        const auto input = diagnostics.probe(0).wait(diagnostics.probe(0).request_state(),
                                                     steady_clock::now() + 1s);
        if (input.report && input.report->state &&
            input.report->state->mp_state.mp_state == KVM_MP_STATE_HALTED)
            break;
        ASSERT_LT(steady_clock::now(), deadline) << "the vCPU never halted";
    }
    diagnostics.dump("test", spdlog::level::warn, 5s);
    EXPECT_TRUE(logged("vCPU dump (test)")) << log();
    EXPECT_TRUE(logged("vCPU 0: RIP=0000000000001005")) << log();  // past the hlt
    EXPECT_TRUE(logged("mp_state=halted")) << log();
    EXPECT_TRUE(logged("io w 80/1")) << log();
    EXPECT_TRUE(logged("kick")) << log();
    EXPECT_TRUE(logged("last used-ring write: none yet")) << log();
    stop = true;
    diagnostics.kick_all();
}

TEST_F(VcpuDiagnosticsTest, SigUsr2DumpsWithoutStoppingTheGuest) {
    auto g = guest(kOutThenHalt);
    SKIP_WITHOUT_KVM(g);
    VcpuDiagnostics diagnostics(1);
    diagnostics.start(0s);
    std::atomic<bool> stop{false};
    std::jthread vcpu([&] { TinyGuest::run(diagnostics.probe(0), g->vcpu(), stop); });
    ::kill(::getpid(), kDumpSignal);
    const auto deadline = steady_clock::now() + 20s;
    while (!logged("last used-ring write") && steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(logged("warning: vCPU dump (SIGUSR2)")) << log();
    EXPECT_TRUE(logged("vCPU 0: RIP=")) << log();
    stop = true;
    diagnostics.kick_all();
}

// The watchdog with its clock driven by the test: vCPU 1 has no thread and never answers; vCPU 0
// runs a guest and answers its kicks where /dev/kvm can run one, and has no thread either where
// it cannot.  No step depends on how fast this machine is.
TEST_F(VcpuDiagnosticsTest, WatchdogReportsAVcpuThatDoesNotAnswerOnce) {
    VcpuDiagnostics diagnostics(2);
    auto g = guest(kOutThenHalt);
    std::atomic<bool> stop{false};
    std::jthread vcpu;
    if (g) vcpu = std::jthread([&] { TinyGuest::run(diagnostics.probe(0), g->vcpu(), stop); });

    diagnostics.check_watchdog(1s, steady_clock::now());  // kicks both; nobody is late yet
    EXPECT_FALSE(logged("vCPU dump")) << log();
    if (g) {  // wait for vCPU 0's answer, however long a loaded machine takes to give it
        const auto deadline = steady_clock::now() + 60s;
        while (diagnostics.probe(0).unanswered_since() && steady_clock::now() < deadline)
            std::this_thread::sleep_for(10ms);
        ASSERT_FALSE(diagnostics.probe(0).unanswered_since()) << "vCPU 0 never answered a kick";
    }
    ASSERT_TRUE(diagnostics.probe(1).unanswered_since());

    const auto later = steady_clock::now() + 2s;  // past the limit for vCPU 1's kick
    for (int check = 0; check < 3; ++check) diagnostics.check_watchdog(1s, later + check * 500ms);
    const std::string all = log();
    const std::string late = g ? "vCPU 1" : "vCPU 0, 1";
    EXPECT_NE(
        all.find("watchdog: " + late + " did not come back from KVM_RUN within 1 s of a kick"),
        std::string::npos)
        << all;
    EXPECT_NE(all.find("vCPU 1: no answer, not in KVM_RUN, kicked"), std::string::npos) << all;
    EXPECT_EQ(all.find("vCPU dump"), all.rfind("vCPU dump")) << "one dump per stall\n" << all;
    stop = true;
    diagnostics.kick_all();
}

// The watchdog's own thread: it kicks on its own and reports the vCPU that never answers.
TEST_F(VcpuDiagnosticsTest, WatchdogThreadReportsAStuckVcpu) {
    VcpuDiagnostics diagnostics(1);  // no thread runs vCPU 0
    diagnostics.start(1s);
    const auto deadline = steady_clock::now() + 60s;
    while (!logged("last used-ring write") && steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(logged("watchdog: vCPU 0 did not come back from KVM_RUN within 1 s of a kick"))
        << log();
}

// What mvmm logs at exit code 4: the vCPU left its loop at KVM_EXIT_SHUTDOWN, and its last
// state (read on its way out) answers the dump.  Here KVM keeps the faulting state; SVM would
// show the INIT state and say so.
TEST_F(VcpuDiagnosticsTest, TripleFaultLeavesItsStateAndExitsForTheDump) {
    auto g = guest(kUd2, true);
    SKIP_WITHOUT_KVM(g);
    VcpuDiagnostics diagnostics(1);
    std::atomic<bool> stop{false};
    ASSERT_EQ(TinyGuest::run(diagnostics.probe(0), g->vcpu(), stop), uint32_t{KVM_EXIT_SHUTDOWN});
    diagnostics.dump("the guest crashed", spdlog::level::err, 1s);
    EXPECT_TRUE(logged("error: vCPU dump (the guest crashed)")) << log();
    EXPECT_TRUE(logged("vCPU 0: RIP=0000000000001000")) << log();  // at the ud2
    EXPECT_TRUE(logged("CS=0008")) << log();
    EXPECT_TRUE(logged("CR0=60000011")) << log();
    EXPECT_TRUE(logged("last exits: shutdown")) << log();
}

}  // namespace
}  // namespace mvmm
