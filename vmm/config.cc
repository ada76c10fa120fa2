#include "vmm/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>

#include "devices/pci/host_bridge.h"
#include "mem/guest_ram.h"
#include "vmm/api/server.h"
#include "vmm/boot/bzimage.h"
#include "vmm/io_threads.h"
#include "vmm/layout.h"

namespace mvmm {

namespace {

constexpr unsigned kMaxCpus = 255;  // xAPIC IDs, one byte

void check_readable_file(const std::string& what, const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) throw UsageError(what + " '" + path + "' does not exist");
    if (!S_ISREG(st.st_mode)) throw UsageError(what + " '" + path + "' is not a regular file");
    if (::access(path.c_str(), R_OK) != 0)
        throw UsageError(what + " '" + path + "' is not readable");
}

// The file need not exist yet, but its directory must.
void check_writable_file(const std::string& what, const std::string& path) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) {
        if (S_ISDIR(st.st_mode)) throw UsageError(what + " '" + path + "' is a directory");
        if (::access(path.c_str(), W_OK) != 0)
            throw UsageError(what + " '" + path + "' is not writable");
        return;
    }
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    if (::access(dir.c_str(), W_OK) != 0)
        throw UsageError(what + " '" + path + "' cannot be created: no writable directory '" + dir +
                         "'");
}

// Loading places the initrd the same way, once guest RAM exists.
void check_initrd(const std::string& path, const boot::BzImage& kernel, uint64_t memory) {
    check_readable_file("--initrd", path);
    const auto low_ram = layout::ram_ranges(memory).front();
    try {
        boot::place_initrd(kernel, std::filesystem::file_size(path),
                           low_ram.base.value() + low_ram.size);
    } catch (const boot::BootError& e) {
        throw UsageError("--initrd '" + path + "': " + e.what());
    }
}

// What the host cannot give (a path= that is no writable directory, hugepages it lacks, a NUMA
// node it does not have) is known before any RAM is mapped.
void check_ram(const RamConfig& ram) {
    try {
        check_guest_ram(ram, layout::ram_ranges(ram.size));
    } catch (const RamError& e) {
        throw UsageError(std::string("--memory: ") + e.what());
    }
}

void check_api_socket(const std::string& path) {
    try {
        api::check_socket_path(path);
    } catch (const api::ApiSocketError& e) {
        throw UsageError(std::string("--api-socket: ") + e.what());
    }
}

void check_pci(const DiskOptions& disks, unsigned empty_root_ports) {
    using devices::virtio::blk::DiskBus;
    const auto on_root = static_cast<unsigned>(
        std::ranges::count(disks.blk, DiskBus::Root, &devices::virtio::blk::DiskConfig::bus) +
        std::ranges::count(disks.scsi, DiskBus::Root, &ScsiControllerOption::bus));
    const auto root_ports =
        static_cast<unsigned>(disks.blk.size() + disks.scsi.size()) - on_root + empty_root_ports;
    if (!devices::pci::fits_on_root_bus(on_root, root_ports))
        throw UsageError(
            "--disk, --scsi-controller, --empty-root-ports: " + std::to_string(on_root) +
            " virtio-blk disks and SCSI controllers on bus=root and " + std::to_string(root_ports) +
            " root ports do not fit on PCI bus 0 (31 slots: bus=root takes a slot, "
            "root ports take eight to a slot)");
}

// Controllers first: a --disk names its controller by id.
DiskOptions parse_disks(const std::vector<std::string>& controllers,
                        const std::vector<std::string>& disks) {
    DiskOptions options;
    for (const auto& text : controllers) {
        auto controller = parse_scsi_controller_option(text);
        const auto& id = controller.controller.id;
        if (std::ranges::any_of(options.scsi, [&](const auto& c) { return c.controller.id == id; }))
            throw UsageError("--scsi-controller '" + text + "': id=" + id + " is given twice");
        options.scsi.push_back(std::move(controller));
    }
    for (const auto& text : disks) add_disk_option(text, options);
    return options;
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path, const char* what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(std::string("cannot read ") + what + " '" + path + "'");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

SerialConfig parse_serial(const std::string& text) {
    if (text == "stdio") return {};
    if (text.rfind("file:", 0) == 0 && text.size() > 5)
        return {SerialConfig::Kind::File, text.substr(5)};
    throw UsageError("--serial takes 'stdio' or 'file:PATH', not '" + text + "'");
}

Config parse_command_line(int argc, char** argv) {
    Config config;
    CLI::App app{"mvmm: a minimal KVM virtual machine monitor that boots Linux guests", "mvmm"};
    app.set_version_flag("--version", std::string("mvmm ") + MVMM_VERSION);
    app.add_option("--kernel", config.kernel, "Linux bzImage to boot")->required();
    app.add_option("--initrd", config.initrd, "initramfs to load next to the kernel");
    app.add_option("--cmdline", config.cmdline, "kernel command line")->capture_default_str();
    std::string memory = "512M";
    app.add_option("--memory", memory,
                   "guest RAM: SIZE or size=SIZE[,hugepages=2M|1G][,shared=on][,path=DIR]"
                   "[,prealloc=on][,prealloc-threads=N][,prealloc-method=touch|populate]"
                   "[,host-node=N]")
        ->capture_default_str();
    app.add_option("--cpus", config.cpus, "number of vCPUs")->capture_default_str();
    std::string serial = "stdio";
    app.add_option("--serial", serial, "where COM1 goes: stdio or file:PATH")
        ->capture_default_str();
    std::vector<std::string> disks;
    app.add_option("--disk", disks,
                   "a virtio-blk disk: path=FILE[,readonly=on][,serial=S][,queues=N]"
                   "[,queue-size=N][,bus=rootport|root]; or a SCSI disk: path=FILE,controller=ID"
                   "[,lun=N][,readonly=on][,serial=S] (queue-size: the most entries each "
                   "queue's ring may have, and so its request slots; a power of two from 4 to "
                   "1024, default 256; 1024 is QEMU's limit, as QEMU hands a request's buffers "
                   "to one preadv, which takes at most IOV_MAX (1024); lun: 0-16383, default the "
                   "lowest free; serial: the by-id name, default the end of the file name); "
                   "repeat for more disks");
    std::vector<std::string> scsi_controllers;
    app.add_option("--scsi-controller", scsi_controllers,
                   "a virtio-scsi controller for the --disk options that name it: id=ID"
                   "[,queues=N][,queue-size=N][,bus=rootport|root] (queue-size as for --disk, "
                   "for every queue); one without disks is allowed (an empty SCSI host)");
    app.add_option("--empty-root-ports", config.empty_root_ports,
                   "PCIe root ports with nothing behind them, after the disks' own (as QEMU's "
                   "pcie-root-port without a device)")
        ->check(CLI::Range(0u, 248u));
    std::string request_alloc = "pool";
    app.add_option("--request-alloc", request_alloc,
                   "where disk requests in flight live (virtio-blk and virtio-scsi): pool (slots "
                   "per queue, reused, nothing allocated or zeroed per request), malloc or calloc "
                   "(one heap allocation per request, zeroed with calloc, as QEMU did)")
        ->capture_default_str();
    app.add_option("--io-threads", config.io_threads,
                   "threads that run disk I/O (default: one per host CPU, at most 4)")
        ->check(CLI::Range(1u, IoThreads::kMaxCount));
    app.add_option("--api-socket", config.api_socket,
                   "UNIX socket for management commands (query-status, query-memory, "
                   "trim-memory, quit; one JSON object per line)");
    app.add_option("--vcpu-watchdog", config.vcpu_watchdog,
                   "log a vCPU dump when a vCPU has not come back from KVM_RUN SEC seconds "
                   "after a kick (0: off)")
        ->capture_default_str()
        ->check(CLI::Range(0u, 3600u));
    app.add_option("--report", config.report,
                   "write a JSON report of this run to FILE at exit, also when it fails: phase "
                   "times, guest markers, memory, trims, VM exits (README.md, \"Boot report\")");
    std::string trim_policy = "drain";
    app.add_option("--trim-policy", trim_policy,
                   "when the RCU call thread gives free heap back to the OS: off, batch (after "
                   "every batch), drain (when the queue drains) or adaptive (rate-limited)")
        ->capture_default_str();
    app.add_option("--trim-factor", config.trim.factor,
                   "adaptive policy: wait at least K times the last trim's duration")
        ->capture_default_str();
    app.add_option(
           "--log-level", config.log_level,
           "trace, debug, info, warn, error or off (coloured on a terminal unless NO_COLOR is set)")
        ->capture_default_str()
        ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        std::exit(app.exit(e));
    } catch (const CLI::CallForVersion& e) {
        std::exit(app.exit(e));
    } catch (const CLI::ParseError& e) {
        throw UsageError(e.what());
    }
    config.serial = parse_serial(serial);
    config.memory = parse_memory_option(memory);
    config.disks = parse_disks(scsi_controllers, disks);
    config.request_alloc = parse_request_alloc_option(request_alloc);
    for (auto& disk : config.disks.blk) disk.request_alloc = config.request_alloc;
    for (auto& scsi : config.disks.scsi) scsi.controller.request_alloc = config.request_alloc;
    try {
        config.trim.policy = rcu::parse_trim_policy(trim_policy);
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--trim-policy: ") + e.what());
    }
    try {
        config.trim.validate();
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--trim-factor: ") + e.what());
    }
    return config;
}

void validate(const Config& config) {
    check_readable_file("--kernel", config.kernel);
    const auto kernel_file = read_file(config.kernel, "--kernel");
    std::optional<boot::BzImage> kernel;
    try {
        kernel = boot::parse_bzimage(kernel_file);
    } catch (const boot::BootError& e) {
        throw UsageError("--kernel '" + config.kernel + "': " + e.what());
    }
    try {
        boot::check_cmdline(*kernel, config.cmdline);
    } catch (const boot::BootError& e) {
        throw UsageError(std::string("--cmdline: ") + e.what());
    }
    if (config.cpus == 0 || config.cpus > kMaxCpus)
        throw UsageError("--cpus must be between 1 and " + std::to_string(kMaxCpus));
    const uint64_t memory = config.memory.size;
    constexpr uint64_t kMinMemory = 64ull << 20;
    if (memory < kMinMemory) throw UsageError("--memory must be at least 64M");
    uint64_t host = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGE_SIZE));
    if (memory > host)
        throw UsageError("--memory " + format_size(memory) + " is more than this host has (" +
                         format_size(host) + ")");
    check_ram(config.memory);
    if (!config.initrd.empty()) check_initrd(config.initrd, *kernel, memory);
    check_pci(config.disks, config.empty_root_ports);
    if (config.serial.kind == SerialConfig::Kind::File)
        check_writable_file("--serial file", config.serial.path);
    if (!config.api_socket.empty()) check_api_socket(config.api_socket);
}

}  // namespace mvmm
