// mvmm: parse the command line, check the host, build the machine, run it.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>

#include "mem/guest_ram.h"
#include "vmm/api/server.h"
#include "vmm/boot/bzimage.h"
#include "vmm/boot_report.h"
#include "vmm/config.h"
#include "vmm/disks.h"
#include "vmm/exit_code.h"
#include "vmm/host_check.h"
#include "vmm/io_threads.h"
#include "vmm/machine.h"
#include "vmm/stop_signals.h"

namespace {

using namespace mvmm;

// --report's FILE straight from argv, for a command line that did not parse.
std::string report_argument(int argc, char** argv) {
    constexpr std::string_view kOption = "--report";
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg == kOption && i + 1 < argc) return argv[i + 1];
        if (arg.starts_with(kOption) && arg.size() > kOption.size() && arg[kOption.size()] == '=')
            return std::string(arg.substr(kOption.size() + 1));
    }
    return {};
}

class Run {
  public:
    int operator()(int argc, char** argv) {
        try {
            return boot(argc, argv);
        } catch (const UsageError& e) {
            return fail(kExitUsage, e, argc, argv);
        } catch (const api::ApiSocketError& e) {
            return fail(kExitUsage, e, argc, argv);
        } catch (const RamError& e) {
            return fail(kExitUsage, e, argc, argv);
        } catch (const boot::BootError& e) {
            return fail(kExitUsage, e, argc, argv);
        } catch (const std::exception& e) {
            return fail(kExitInternalError, e, argc, argv);
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
        parsed_ = true;
        if (!config.report.empty()) report_.emplace(config.report);
        spdlog::set_level(spdlog::level::from_str(config.log_level));
        validate(config);
        auto disks = open_disks(config.disks, io.context());
        if (auto why = host_cannot_run_guests()) throw UsageError(*why);
        io.start(config.io_threads ? config.io_threads : IoThreads::default_count());
        Machine machine(config, std::move(disks), report_ ? &*report_ : nullptr);
        std::optional<api::ApiServer> api;
        const IoThreadsStopper stop_io_first(io);  // before the socket server and the machine go
        stop_signals.on_signal([&machine](int signal) {
            machine.request_exit(ExitCode(kExitSignalBase + signal),
                                 signal_name(signal) + ": shutting down");
        });
        if (!config.api_socket.empty()) api.emplace(io.context(), config.api_socket, machine);
        return machine.run();
    }

    int fail(ExitCode code, const std::exception& e, int argc, char** argv) {
        spdlog::error("{}", e.what());
        if (!parsed_) {
            // The command line did not parse: the report is still wanted, if it can be made.
            const std::string path = report_argument(argc, argv);
            try {
                if (!path.empty()) report_.emplace(path);
            } catch (const UsageError& again) {
                spdlog::error("{}", again.what());
            }
        }
        if (report_) report_->stopping(e.what());
        return code;
    }

    bool parsed_ = false;
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
