// An mvmm machine's life: the board the builder made, the vCPU threads that run it, and the
// end of the run (poweroff, reset, crash, an error or a signal: the first reason wins).  It also
// answers the management socket.  run() returns the exit code.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "vmm/api/handler.h"
#include "vmm/board.h"
#include "vmm/cache_cleaner.h"
#include "vmm/cli/validate.h"
#include "vmm/disk_hotplug.h"
#include "vmm/exit_code.h"
#include "vmm/report/boot_report.h"
#include "vmm/report/exit_figures.h"
#include "vmm/vcpu/vcpu_runner.h"

namespace mvmm {

class Machine : public api::ApiHandler {
  public:
    // Builds the board from `plan`; `disks` are opened already, and hot-plugged ones run on
    // `io` too.  `report`, when given, hears of the boot's phases, console and exit figures.
    Machine(BootPlan plan, std::vector<Disk> disks, boost::asio::io_context& io,
            BootReport* report = nullptr);
    Machine(const Machine&) = delete;
    Machine& operator=(const Machine&) = delete;

    // Runs the guest until it powers off, resets or crashes; returns the exit code.
    int run();

    // Ends the machine with `code`; the first request wins.  Callable from any thread.
    void request_exit(ExitCode code, const std::string& reason);

    // The management socket's view.
    nlohmann::json query_status() override;
    nlohmann::json query_disk_caches() override;
    nlohmann::json resize_disk(const std::string& path) override;
    nlohmann::json add_disk(const nlohmann::json& arguments) override;
    nlohmann::json remove_disk(const nlohmann::json& arguments) override;
    nlohmann::json query_disks() override;
    void quit() override;

    // At exit: memory, trims, address-space rebuilds, VM exits (the `exit stats` line).
    ExitFigures exit_figures() const;
    // Every disk image's metadata caches now, in disk order.
    std::vector<ImageCacheFigures> disk_caches() const;

  private:
    void on_power(devices::PowerEvent event);

    const BootPlan plan_;
    BootReport* report_;
    Board board_;
    VcpuRunner vcpus_;
    DiskHotplug disks_;           // destroyed before the board: it finishes releases first
    CacheCleaner cache_cleaner_;  // of disks_' images

    std::mutex exit_mutex_;
    std::condition_variable exit_cv_;
    std::optional<ExitCode> exit_code_;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
};

}  // namespace mvmm
