#include "vmm/vcpu/vcpu_diagnostics.h"

#include <poll.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>

namespace mvmm {

namespace {

using std::chrono::steady_clock;

// Where the SIGUSR2 handler signals; -1: nobody listens.
std::atomic<int> dump_request_fd{-1};

void on_dump_signal(int) {
    const int saved = errno;
    if (const int fd = dump_request_fd.load(); fd >= 0) {
        const uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
    }
    errno = saved;
}

void install(int signal, void (*handler)(int)) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    ::sigaction(signal, &sa, nullptr);
}

int64_t nanoseconds(SteadyTime t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::atomic_ref<uint8_t> immediate_exit(const Vcpu& vcpu) {
    return std::atomic_ref<uint8_t>(vcpu.run().immediate_exit);
}

}  // namespace

void VcpuProbe::attach(const Vcpu& vcpu) {
    std::lock_guard lock(mutex_);
    vcpu_ = &vcpu;
    thread_ = ::pthread_self();
}

int VcpuProbe::run() {
    // A request made before this thread could be kicked is answered here.
    if (wanted_.exchange(false)) answer(false);
    in_run_since_.store(nanoseconds(steady_clock::now()));
    const int result = ::ioctl(vcpu_->fd(), KVM_RUN, 0);
    const int error = errno;
    const auto now = steady_clock::now();
    in_run_since_.store(0);
    const bool interrupted = result < 0 && error == EINTR;
    // A kick is spent; acquire pairs with kick(), so a caller that stopped the machine before
    // kicking is seen by the loop that called run().
    if (interrupted) immediate_exit(*vcpu_).exchange(0, std::memory_order_acq_rel);
    if (result == 0 || interrupted) exits_.record(describe_exit(vcpu_->run(), interrupted, now));
    if (wanted_.exchange(false)) answer(false);
    errno = error;
    return result;
}

void VcpuProbe::detach() {
    answer(true);
}

void VcpuProbe::answer(bool final) {
    VcpuReport report;
    try {
        report.state = read_vcpu_state(*vcpu_);
    } catch (const std::exception& e) {
        report.error = e.what();
    }
    std::lock_guard lock(mutex_);
    report_ = std::move(report);
    answered_ticket_ = requested_;
    unanswered_since_.reset();
    if (final) {  // no kick touches the vCPU or its thread again
        final_ = true;
        thread_.reset();
        vcpu_ = nullptr;
    }
    answered_.notify_all();
}

void VcpuProbe::kick() noexcept {
    std::lock_guard lock(mutex_);
    if (!vcpu_) return;  // not started (it answers before its first KVM_RUN), or gone
    immediate_exit(*vcpu_).store(1, std::memory_order_release);
    if (thread_) ::pthread_kill(*thread_, kKickSignal);
}

uint64_t VcpuProbe::request_state() {
    uint64_t ticket;
    {
        std::lock_guard lock(mutex_);
        ticket = ++requested_;
        if (!unanswered_since_) unanswered_since_ = steady_clock::now();
    }
    wanted_.store(true);
    kick();
    return ticket;
}

VcpuDumpInput VcpuProbe::wait(uint64_t ticket, SteadyTime deadline) {
    std::unique_lock lock(mutex_);
    auto answered = [&] { return final_ || answered_ticket_ >= ticket; };
    answered_.wait_until(lock, deadline, answered);
    VcpuDumpInput input;
    input.index = index_;
    input.exits = exits_.last();
    input.kicked_at = unanswered_since_;
    if (answered()) input.report = report_;
    if (const int64_t since = in_run_since_.load(); since != 0)
        input.in_run_since = SteadyTime(std::chrono::nanoseconds(since));
    return input;
}

std::optional<SteadyTime> VcpuProbe::unanswered_since() const {
    std::lock_guard lock(mutex_);
    return final_ ? std::nullopt : unanswered_since_;
}

VcpuDiagnostics::VcpuDiagnostics(unsigned vcpus) {
    for (unsigned i = 0; i < vcpus; ++i) probes_.push_back(std::make_unique<VcpuProbe>(i));
    install(kKickSignal, [](int) {});
    install(kDumpSignal, on_dump_signal);
    dump_request_fd.store(dump_requests_.get());
}

VcpuDiagnostics::~VcpuDiagnostics() {
    int ours = dump_requests_.get();
    dump_request_fd.compare_exchange_strong(ours, -1);
    stop_.signal();
}

void VcpuDiagnostics::kick_all() noexcept {
    for (auto& probe : probes_) probe->kick();
}

void VcpuDiagnostics::add_device(std::string name, const devices::virtio::QueueCounters& counters) {
    std::lock_guard lock(devices_mutex_);
    devices_.push_back({std::move(name), &counters});
}

void VcpuDiagnostics::start(std::chrono::seconds watchdog) {
    thread_ = std::jthread([this, watchdog](std::stop_token stop) { serve(stop, watchdog); });
}

void VcpuDiagnostics::serve(std::stop_token stop, std::chrono::seconds watchdog) {
    pollfd fds[] = {{dump_requests_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    // Half the limit between kicks: a vCPU stuck since just after one is seen within 1.5x.
    const int period_ms = watchdog.count() > 0 ? static_cast<int>(watchdog.count() * 500) : -1;
    while (!stop.stop_requested()) {
        if (::poll(fds, 2, period_ms) < 0 && errno != EINTR) {
            spdlog::warn("vCPU diagnostics stopped: poll: {}", std::strerror(errno));
            return;
        }
        if (stop_.consume() > 0) return;
        if (dump_requests_.consume() > 0)
            dump("SIGUSR2", spdlog::level::warn, std::chrono::seconds(1));
        if (watchdog.count() > 0) check_watchdog(watchdog, steady_clock::now());
    }
}

void VcpuDiagnostics::check_watchdog(std::chrono::seconds limit, SteadyTime now) {
    std::string stuck;
    for (unsigned i = 0; i < probes_.size(); ++i)
        if (auto since = probes_[i]->unanswered_since(); since && now - *since >= limit)
            stuck += (stuck.empty() ? "" : ", ") + std::to_string(i);
    if (!stuck.empty() && !stall_reported_)
        dump(fmt::format("watchdog: vCPU {} did not come back from KVM_RUN within {} s of a kick",
                         stuck, limit.count()),
             spdlog::level::warn, std::chrono::seconds(1));
    else if (stuck.empty() && stall_reported_)
        spdlog::warn("watchdog: every vCPU answers its kicks again");
    stall_reported_ = !stuck.empty();
    for (auto& probe : probes_)
        if (!probe->unanswered_since()) probe->request_state();
}

void VcpuDiagnostics::dump(const std::string& why, spdlog::level::level_enum level,
                           std::chrono::milliseconds patience) {
    std::lock_guard lock(dump_mutex_);
    std::vector<uint64_t> tickets;
    for (auto& probe : probes_) tickets.push_back(probe->request_state());
    const auto deadline = steady_clock::now() + patience;
    std::vector<VcpuDumpInput> inputs;
    for (size_t i = 0; i < probes_.size(); ++i)
        inputs.push_back(probes_[i]->wait(tickets[i], deadline));
    const auto now = steady_clock::now();
    spdlog::log(level, "vCPU dump ({}), times relative to now:", why);
    for (const auto& input : inputs)
        for (const auto& line : format_vcpu(input, now)) spdlog::log(level, "{}", line);
    spdlog::log(level, "{}", device_line(now));
}

void VcpuDiagnostics::remove_device(const devices::virtio::QueueCounters& counters) {
    std::lock_guard lock(devices_mutex_);
    std::erase_if(devices_, [&](const Device& device) { return device.counters == &counters; });
}

std::string VcpuDiagnostics::device_line(SteadyTime now) const {
    std::lock_guard lock(devices_mutex_);
    const Device* latest = nullptr;
    std::optional<devices::virtio::LastUsed> last;
    for (const auto& device : devices_) {
        const auto used = device.counters->last_used();
        if (used && (!last || used->at > last->at)) {
            latest = &device;
            last = used;
        }
    }
    if (!latest) return "last used-ring write: none yet";
    const double ms = std::chrono::duration<double, std::milli>(last->at - now).count();
    return fmt::format("last used-ring write: {} queue {} {:+.1f}ms ({} requests)", latest->name,
                       last->queue, ms, latest->counters->requests.load());
}

}  // namespace mvmm
