#include "vmm/cli/command_line.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "vmm/cli/usage_error.h"
#include "vmm/io_threads.h"

namespace mvmm {

namespace {

// The option's text as given, converted once the whole line has parsed (so that a controller is
// known before the --disk that names it).
struct RawOptions {
    std::string memory = "512M";
    std::string serial = "stdio";
    std::vector<std::string> disks;
    std::vector<std::string> scsi_controllers;
    std::string request_alloc = "pool";
    std::string cache_alloc = "mapping";
    std::string trim_policy = "drain";
};

// Help texts stay one line each: README.md ("Running mvmm") tells the whole story.
void add_guest_options(CLI::App& app, Config& config, RawOptions& raw) {
    app.add_option("--kernel", config.kernel, "Linux bzImage to boot")->required();
    app.add_option("--initrd", config.initrd, "initramfs to load next to the kernel");
    app.add_option("--cmdline", config.cmdline, "kernel command line")->capture_default_str();
    app.add_option("--memory", raw.memory,
                   "guest RAM: SIZE or size=SIZE[,hugepages=2M|1G][,shared=on][,path=DIR]"
                   "[,prealloc=on][,prealloc-threads=N][,prealloc-method=touch|populate]"
                   "[,host-node=N]")
        ->capture_default_str();
    app.add_option("--cpus", config.cpus, "number of vCPUs (1-255)")->capture_default_str();
    app.add_option("--serial", raw.serial, "where COM1 goes: stdio or file:PATH")
        ->capture_default_str();
}

void add_disk_options(CLI::App& app, Config& config, RawOptions& raw) {
    app.add_option("--disk", raw.disks,
                   "a virtio-blk disk: path=FILE[,readonly=on][,serial=S][,queues=N (default: one "
                   "per vCPU)]"
                   "[,queue-size=N][,bus=rootport|root][,cache=writeback|none (O_DIRECT; for a "
                   "qcow2 image its backing files too)][,aio=io_uring|threads|sync (default: "
                   "io_uring where the kernel has "
                   "it)], or a LUN of a SCSI controller: "
                   "path=FILE,controller=ID[,target=T][,lun=N][,readonly=on][,serial=S]"
                   "[,cache=writeback|none][,aio=io_uring|threads|sync]; both "
                   "take [,format=raw|qcow2][,logical-block-size=512|4096][,physical-block-size=N]"
                   " and, for qcow2 images, [,l2-cache-size=SIZE][,refcount-cache-size=SIZE]"
                   "[,cache-clean-interval=SEC] (QEMU's; a bare SIZE is bytes); repeatable");
    app.add_option(
        "--scsi-controller", raw.scsi_controllers,
        "a virtio-scsi controller: id=ID[,queues=N (default: one per vCPU)][,queue-size=N]"
        "[,bus=rootport|root][,targets=N (1-256)]; repeatable. Its LUNs can be added "
        "(add-disk controller=ID) and removed (remove-disk id=ID:T:L) while the VM runs, on "
        "targets 0 to N-1, by default up to the highest one given at start");
    app.add_option("--root-ports,--empty-root-ports", config.empty_root_ports,
                   "PCIe root ports with an empty hot-pluggable slot, for add-disk "
                   "(--empty-root-ports is the old name)")
        ->check(CLI::Range(0u, 248u));
    app.add_option("--request-alloc", raw.request_alloc,
                   "where disk requests in flight live: pool, malloc or calloc")
        ->capture_default_str();
    app.add_option("--cache-alloc", raw.cache_alloc,
                   "where qcow2 metadata caches keep their tables: mapping (one per cache) or "
                   "heap (one allocation per table)")
        ->capture_default_str();
    app.add_option("--io-threads", config.io_threads,
                   "threads that run disk I/O (default: one per host CPU that no vCPU runs on, "
                   "1 to 4)")
        ->check(CLI::Range(1u, IoThreads::kMaxCount));
}

void add_run_options(CLI::App& app, Config& config, RawOptions& raw) {
    app.add_option("--api-socket", config.api_socket,
                   "UNIX socket for management commands (one JSON object per line)");
    app.add_option("--vcpu-watchdog", config.vcpu_watchdog,
                   "log a vCPU dump when a vCPU has not come back from KVM_RUN SEC seconds "
                   "after a kick (0: off)")
        ->capture_default_str()
        ->check(CLI::Range(0u, 3600u));
    app.add_option("--report", config.report, "write a JSON report of this run to FILE at exit");
    app.add_option("--trim-policy", raw.trim_policy,
                   "when the RCU call thread trims the heap: off, batch, drain or adaptive")
        ->capture_default_str();
    app.add_option("--trim-factor", config.trim.factor,
                   "adaptive policy: wait at least K times the last trim's duration")
        ->capture_default_str();
    app.add_option("--log-level", config.log_level,
                   "trace, debug, info, warn, error or off (coloured on a terminal unless "
                   "NO_COLOR is set)")
        ->capture_default_str()
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

// Controllers first: a --disk names its controller by id.  Disks and controllers have a queue
// per vCPU unless queues= says otherwise.
DiskOptions parse_disks(const std::vector<std::string>& controllers,
                        const std::vector<std::string>& disks, unsigned cpus) {
    DiskOptions options;
    options.default_queues = cpus;
    for (const auto& text : controllers) {
        auto controller = parse_scsi_controller_option(text, cpus);
        const auto& id = controller.controller.id;
        if (std::ranges::any_of(options.scsi, [&](const auto& c) { return c.controller.id == id; }))
            throw UsageError("--scsi-controller '" + text + "': id=" + id + " is given twice");
        options.scsi.push_back(std::move(controller));
    }
    for (const auto& text : disks) add_disk_option(text, options);
    return options;
}

rcu::TrimConfig parse_trim(const std::string& policy, rcu::TrimConfig trim) {
    try {
        trim.policy = rcu::parse_trim_policy(policy);
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--trim-policy: ") + e.what());
    }
    try {
        trim.validate();
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--trim-factor: ") + e.what());
    }
    return trim;
}

}  // namespace

SerialConfig parse_serial(const std::string& text) {
    if (text == "stdio") return {};
    if (text.rfind("file:", 0) == 0 && text.size() > 5)
        return {SerialConfig::Kind::File, text.substr(5)};
    throw UsageError("--serial takes 'stdio' or 'file:PATH', not '" + text + "'");
}

Config parse_command_line(int argc, char** argv) {
    Config config;
    RawOptions raw;
    CLI::App app{"mvmm: a minimal KVM virtual machine monitor that boots Linux guests", "mvmm"};
    app.footer("Options, exit codes and the boot report: README.md (\"Running mvmm\").");
    app.set_version_flag("--version", std::string("mvmm ") + MVMM_VERSION);
    add_guest_options(app, config, raw);
    add_disk_options(app, config, raw);
    add_run_options(app, config, raw);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        std::exit(app.exit(e));
    } catch (const CLI::CallForVersion& e) {
        std::exit(app.exit(e));
    } catch (const CLI::ParseError& e) {
        throw UsageError(e.what());
    }
    config.serial = parse_serial(raw.serial);
    config.memory = parse_memory_option(raw.memory);
    config.disks = parse_disks(raw.scsi_controllers, raw.disks, config.cpus);
    config.request_alloc = parse_request_alloc_option(raw.request_alloc);
    for (auto& disk : config.disks.blk) disk.request_alloc = config.request_alloc;
    for (auto& scsi : config.disks.scsi) scsi.controller.request_alloc = config.request_alloc;
    const auto cache_alloc = parse_cache_alloc_option(raw.cache_alloc);
    for (auto& disk : config.disks.blk) disk.image.qcow2.cache_alloc = cache_alloc;
    for (auto& scsi : config.disks.scsi)
        for (auto& lun : scsi.controller.luns) lun.image.qcow2.cache_alloc = cache_alloc;
    config.trim = parse_trim(raw.trim_policy, config.trim);
    return config;
}

}  // namespace mvmm
