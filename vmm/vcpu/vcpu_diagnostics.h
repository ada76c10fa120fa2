// vCPU dumps, so that a guest crash or a hung VMM can be read from a console log (issue 14).
// A dump logs, per vCPU, its registers, pending events, mp_state and last exits
// (vcpu_dump.h), then the device that last returned buffers to the guest.  mvmm dumps:
//   - when the guest crashed (exit code 4), at error level, before the exit stats line;
//   - on SIGUSR2, at warning level, and runs on (a soak tool looks at a hung VMM this way);
//   - with --vcpu-watchdog SEC, at warning level, when a vCPU has not answered a kick for SEC
//     seconds: the watchdog kicks every vCPU every SEC / 2 seconds.
// KVM serves a vCPU's ioctls only on its own thread (from another they wait for KVM_RUN to
// end), so a dump kicks each vCPU (immediate_exit, then a signal), the vCPU reads its own state
// before it runs on, and the dumping thread waits for the answers.
#pragma once

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/fd.h"
#include "devices/virtio/queue_worker.h"
#include "vmm/kvm/kvm.h"
#include "vmm/vcpu/vcpu_dump.h"

namespace mvmm {

inline constexpr int kKickSignal = SIGUSR1;  // ends a KVM_RUN; its handler does nothing
inline constexpr int kDumpSignal = SIGUSR2;  // asks for a dump

// One vCPU's side of kicks and dumps.
class VcpuProbe {
  public:
    explicit VcpuProbe(unsigned index) : index_(index) {}

    // On the vCPU's thread.  attach(): this thread runs `vcpu` from now on.  run(): KVM_RUN,
    // recording the exit and answering a state request before and after it; returns what the
    // ioctl returned, with its errno; a kick ends it with EINTR.  detach(): the thread leaves
    // for good; its last state answers every later request.
    void attach(const Vcpu& vcpu);
    int run();
    void detach();

    // Any thread.  kick(): ends the vCPU's KVM_RUN, or the next one.  request_state(): kicks
    // and returns a ticket for wait(), which gives the dump's input for this vCPU, with the
    // state if the vCPU answered by `deadline`.  unanswered_since(): the oldest request not
    // answered yet.
    void kick() noexcept;
    uint64_t request_state();
    VcpuDumpInput wait(uint64_t ticket, SteadyTime deadline);
    std::optional<SteadyTime> unanswered_since() const;

  private:
    void answer(bool final);

    const unsigned index_;
    ExitRing exits_;
    std::atomic<bool> wanted_{false};
    std::atomic<int64_t> in_run_since_{0};  // steady_clock nanoseconds; 0: not in KVM_RUN

    mutable std::mutex mutex_;
    std::condition_variable answered_;
    const Vcpu* vcpu_ = nullptr;
    std::optional<pthread_t> thread_;  // while attached
    uint64_t requested_ = 0;           // the last ticket handed out
    uint64_t answered_ticket_ = 0;
    std::optional<SteadyTime> unanswered_since_;
    std::optional<VcpuReport> report_;
    bool final_ = false;
};

class VcpuDiagnostics {
  public:
    // Installs the kick and dump signal handlers.
    explicit VcpuDiagnostics(unsigned vcpus);
    ~VcpuDiagnostics();
    VcpuDiagnostics(const VcpuDiagnostics&) = delete;
    VcpuDiagnostics& operator=(const VcpuDiagnostics&) = delete;

    VcpuProbe& probe(unsigned index) { return *probes_.at(index); }
    void kick_all() noexcept;
    // A device a dump may name; `counters` must live until remove_device() (hot-plug) or
    // this dies.  Thread-safe.
    void add_device(std::string name, const devices::virtio::QueueCounters& counters);
    void remove_device(const devices::virtio::QueueCounters& counters);

    // Starts the thread that answers SIGUSR2 and, unless `watchdog` is 0, runs the watchdog.
    void start(std::chrono::seconds watchdog);
    // Kicks every vCPU, waits up to `patience` for their states and logs the dump.
    void dump(const std::string& why, spdlog::level::level_enum level,
              std::chrono::milliseconds patience);
    // One round of the watchdog at time `now` (its thread calls it every `limit` / 2; tests
    // drive the clock): dumps once when a vCPU has not answered a kick for `limit`, says so
    // when every vCPU answers again, and kicks every vCPU that has no kick pending.
    void check_watchdog(std::chrono::seconds limit, SteadyTime now);

  private:
    struct Device {
        std::string name;
        const devices::virtio::QueueCounters* counters;
    };

    void serve(std::stop_token stop, std::chrono::seconds watchdog);
    std::string device_line(SteadyTime now) const;

    std::vector<std::unique_ptr<VcpuProbe>> probes_;
    mutable std::mutex devices_mutex_;
    std::vector<Device> devices_;  // requires devices_mutex_
    EventFd dump_requests_;        // the SIGUSR2 handler signals it
    EventFd stop_;
    std::mutex dump_mutex_;  // one dump at a time
    bool stall_reported_ = false;
    std::jthread thread_;  // last: stopped and joined first
};

}  // namespace mvmm
