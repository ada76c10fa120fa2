// mvmm: parse the command line, check the host, build the machine, run it.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

#include "mem/guest_ram.h"
#include "vmm/api/server.h"
#include "vmm/boot/bzimage.h"
#include "vmm/config.h"
#include "vmm/disks.h"
#include "vmm/exit_code.h"
#include "vmm/host_check.h"
#include "vmm/io_threads.h"
#include "vmm/machine.h"
#include "vmm/stop_signals.h"

int main(int argc, char** argv) {
    using namespace mvmm;
    auto logger = spdlog::stderr_color_mt("mvmm");
    logger->set_pattern("mvmm: %^%l%$: %v");
    spdlog::set_default_logger(logger);
    try {
        IoThreads io;
        StopSignals stop_signals(io.context());  // before any thread starts
        Config config = parse_command_line(argc, argv);
        spdlog::set_level(spdlog::level::from_str(config.log_level));
        validate(config);
        auto disks = open_disks(config.disks, io.context());
        if (auto why = host_cannot_run_guests()) {
            spdlog::error("{}", *why);
            return kExitUsage;
        }
        io.start(config.io_threads ? config.io_threads : IoThreads::default_count());
        Machine machine(config, std::move(disks));
        std::optional<api::ApiServer> api;
        const IoThreadsStopper stop_io_first(io);  // before the socket server and the machine go
        stop_signals.on_signal([&machine](int signal) {
            machine.request_exit(ExitCode(kExitSignalBase + signal),
                                 signal_name(signal) + ": shutting down");
        });
        if (!config.api_socket.empty()) api.emplace(io.context(), config.api_socket, machine);
        return machine.run();
    } catch (const UsageError& e) {
        spdlog::error("{}", e.what());
        return kExitUsage;
    } catch (const api::ApiSocketError& e) {
        spdlog::error("{}", e.what());
        return kExitUsage;
    } catch (const RamError& e) {
        spdlog::error("{}", e.what());
        return kExitUsage;
    } catch (const boot::BootError& e) {
        spdlog::error("{}", e.what());
        return kExitUsage;
    } catch (const std::exception& e) {
        spdlog::error("{}", e.what());
        return kExitInternalError;
    }
}
