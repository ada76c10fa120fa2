#include "vmm/machine.h"

#include <optional>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "devices/serial/uart16550.h"
#include "rcu/rcu.h"

namespace mvmm {

Machine::Machine(BootPlan plan, std::vector<Disk> disks, boost::asio::io_context& io,
                 BootReport* report)
    : plan_(std::move(plan)),
      report_(report),
      board_(plan_, std::move(disks), {[this](devices::PowerEvent e) { on_power(e); }, report}),
      vcpus_(
          board_.vcpus, board_.mmio, board_.pio,
          [this](ExitCode code, const std::string& reason) { request_exit(code, reason); }, report),
      disks_({*board_.pci, board_.mmio, board_.platform, board_.memory, io,
              plan_.config.request_alloc, plan_.config.cpus, vcpus_.diagnostics(),
              [this](std::chrono::seconds interval) {
                  cache_cleaner_.clean_at_least_every(interval);
              }},
             board_.disks),
      cache_cleaner_(io, [this](const auto& clean) { disks_.for_each_image(clean); }) {
    for (const auto& disk : board_.disks)
        vcpus_.diagnostics().add_device(disk.name, *disk.counters);
}

void Machine::on_power(devices::PowerEvent event) {
    if (event == devices::PowerEvent::PowerOff)
        request_exit(kExitPowerOff, "the guest powered off");
    else
        request_exit(kExitGuestReset, "the guest requested a reset");
}

nlohmann::json Machine::query_status() {
    std::lock_guard lock(exit_mutex_);
    const auto uptime = std::chrono::steady_clock::now() - started_;
    const Config& config = plan_.config;
    return {{"status", exit_code_ ? "stopping" : "running"},
            {"cpus", config.cpus},
            {"disks", disks_.disks().size()},
            {"scsi_controllers", config.disks.scsi.size()},
            {"memory_bytes", board_.memory.total_size()},
            {"uptime_ms", std::chrono::duration_cast<std::chrono::milliseconds>(uptime).count()}};
}

nlohmann::json Machine::resize_disk(const std::string& path) {
    const auto size = disks_.resize(path);
    if (!size) throw std::invalid_argument("no disk has path=" + path);
    return {{"path", path}, {"size_bytes", *size}};
}

nlohmann::json Machine::add_disk(const nlohmann::json& arguments) {
    return disks_.add(arguments);
}

nlohmann::json Machine::remove_disk(const nlohmann::json& arguments) {
    return disks_.remove(arguments);
}

nlohmann::json Machine::query_disks() {
    return disks_.query();
}

void Machine::quit() {
    request_exit(kExitPowerOff, "quit requested on the management socket");
}

ExitFigures Machine::exit_figures() const {
    MachineFigures machine{board_.memory.resident_bytes(),
                           board_.mmio.stats(),
                           board_.pio.stats(),
                           vcpus_.exits().by_kind(),
                           board_.platform.routing_pushes(),
                           plan_.config.request_alloc,
                           {},
                           disk_caches()};
    for (const auto& disk : disks_.disks())
        machine.devices.push_back({disk.name, disk.counters->statistics()});
    return {read_process_figures(), std::move(machine)};
}

std::vector<ImageCacheFigures> Machine::disk_caches() const {
    std::vector<ImageCacheFigures> images;
    disks_.for_each_image([&](const devices::block::DiskImage& image) {
        images.push_back(read_image_cache_figures(image));
    });
    return images;
}

nlohmann::json Machine::query_disk_caches() {
    return disk_caches_json(disk_caches());
}

void Machine::request_exit(ExitCode code, const std::string& reason) {
    {
        std::lock_guard lock(exit_mutex_);
        if (exit_code_) return;
        exit_code_ = code;
    }
    if (report_) {
        report_->stamp(BootEvent::GuestStopped);
        report_->stopping(reason);
    }
    if (code == kExitPowerOff || code > kExitSignalBase)
        spdlog::info("{}", reason);
    else
        spdlog::error("{} (exit code {})", reason, int(code));
    vcpus_.stop();
    exit_cv_.notify_all();
}

int Machine::run() {
    board_.console.start(
        [uart = board_.uart](std::span<const uint8_t> bytes) { uart->receive(bytes); });
    vcpus_.start(std::chrono::seconds(plan_.config.vcpu_watchdog));
    std::unique_lock lock(exit_mutex_);
    exit_cv_.wait(lock, [&] { return exit_code_.has_value(); });
    const ExitCode code = *exit_code_;
    lock.unlock();
    if (code == kExitGuestCrash)
        vcpus_.diagnostics().dump("the guest crashed", spdlog::level::err, std::chrono::seconds(2));
    vcpus_.join();
    rcu::drain();  // the address-space updates of this boot, freed and trimmed per the policy
    ExitFigures figures = exit_figures();
    spdlog::info("exit stats: {}", exit_stats_line(figures));
    if (report_) report_->set_figures(std::move(figures));
    return code;
}

}  // namespace mvmm
