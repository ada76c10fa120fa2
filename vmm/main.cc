// mvmm: parse the command line, check the host, build the machine, run it.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "base/user_error.h"
#include "rcu/trim.h"
#include "vmm/api/server.h"
#include "vmm/cli/command_line.h"
#include "vmm/cli/usage_error.h"
#include "vmm/cli/validate.h"
#include "vmm/disks.h"
#include "vmm/exit_code.h"
#include "vmm/io_threads.h"
#include "vmm/kvm/host_check.h"
#include "vmm/machine.h"
#include "vmm/report/boot_report.h"
#include "vmm/stop_signals.h"

namespace {

using namespace mvmm;

// Each disk and LUN holds its image's fd, and with aio=io_uring a ring per queue: hundreds of
// disks need more than the usual soft limit of 1024 open files.  As QEMU does, mvmm raises its
// soft limit to the hard one (its event loops use epoll, never select).
void raise_open_file_limit() {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
        spdlog::warn("cannot raise the open file limit to {}: {}", limit.rlim_max,
                     std::strerror(errno));
}

class Run {
  public:
    int operator()(int argc, char** argv) {
        try {
            return boot(argc, argv);
        } catch (const UserError& e) {  // the command line, its files, what the host lacks
            return fail(kExitUsage, e);
        } catch (const std::exception& e) {
            return fail(kExitInternalError, e);
        }
    }

    // Writes the report, if one was asked for, with the run's exit code.
    void finish(int code) {
        if (report_) report_->write(code);
    }

  private:
    int boot(int argc, char** argv) {
        IoThreads io;
        StopSignals stop_signals(io.context());  // before any thread starts
        Config config = parse_command_line(argc, argv);
        spdlog::set_level(spdlog::level::from_str(config.log_level));
        BootPlan plan = validate(std::move(config));
        raise_open_file_limit();
        auto disks = open_disks(plan.config.disks, io.context());
        if (auto why = host_cannot_run_guests()) throw UsageError(*why);
        // The command line is accepted: from here on the run is reported, whatever its end.
        if (!plan.config.report.empty()) report_.emplace(plan.config.report);
        rcu::set_trim_policy(plan.config.trim);
        io.start(plan.config.io_threads ? plan.config.io_threads
                                        : IoThreads::default_count(plan.config.cpus));
        const std::string api_socket = plan.config.api_socket;
        Machine machine(std::move(plan), std::move(disks), io.context(),
                        report_ ? &*report_ : nullptr);
        std::optional<api::ApiServer> api;
        const IoThreadsStopper stop_io_first(io);  // before the socket server and the machine go
        stop_signals.on_signal([&machine](int signal) {
            machine.request_exit(ExitCode(kExitSignalBase + signal),
                                 signal_name(signal) + ": shutting down");
        });
        if (!api_socket.empty()) api.emplace(io.context(), api_socket, machine);
        return machine.run();
    }

    int fail(ExitCode code, const std::exception& e) {
        spdlog::error("{}", e.what());
        if (report_) report_->stopping(e.what());
        return code;
    }

    std::optional<BootReport> report_;
};

}  // namespace

int main(int argc, char** argv) {
    // Colour only on a colour terminal (spdlog's automatic mode) and never under NO_COLOR
    // (no-color.org): a log file or a console relayed into one gets plain text.
    const char* no_color = std::getenv("NO_COLOR");
    auto logger = spdlog::stderr_color_mt(
        "mvmm", no_color && *no_color ? spdlog::color_mode::never : spdlog::color_mode::automatic);
    logger->set_pattern("mvmm: %^%l%$: %v");
    spdlog::set_default_logger(logger);
    Run run;
    const int code = run(argc, argv);
    run.finish(code);
    return code;
}
