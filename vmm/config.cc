#include "vmm/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>

#include "vmm/boot/bzimage.h"
#include "vmm/options.h"

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
                   "[,bus=rootport|root]; repeat for more disks");
    app.add_option("--io-threads", config.io_threads,
                   "threads that run disk I/O (default: one per host CPU, at most 4)");
    app.add_option("--api-socket", config.api_socket,
                   "UNIX socket for management commands (query-status, query-memory, "
                   "trim-memory, quit; one JSON object per line)");
    std::string trim_policy = "drain";
    app.add_option("--trim-policy", trim_policy,
                   "when the RCU call thread gives free heap back to the OS: off, batch (after "
                   "every batch), drain (when the queue drains) or adaptive (rate-limited)")
        ->capture_default_str();
    app.add_option("--trim-factor", config.trim.factor,
                   "adaptive policy: wait at least K times the last trim's duration")
        ->capture_default_str();
    app.add_option("--log-level", config.log_level, "trace, debug, info, warn, error or off")
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
    for (const auto& disk : disks) config.disks.push_back(parse_disk_option(disk));
    try {
        config.trim.policy = rcu::parse_trim_policy(trim_policy);
        config.trim.validate();
    } catch (const std::invalid_argument& e) {
        throw UsageError(std::string("--trim-policy: ") + e.what());
    }
    return config;
}

void validate(const Config& config) {
    check_readable_file("kernel", config.kernel);
    try {
        boot::parse_bzimage(read_file(config.kernel, "kernel"));
    } catch (const boot::BootError& e) {
        throw UsageError("kernel '" + config.kernel + "': " + e.what());
    }
    if (!config.initrd.empty()) check_readable_file("initrd", config.initrd);
    if (config.cpus == 0 || config.cpus > kMaxCpus)
        throw UsageError("--cpus must be between 1 and " + std::to_string(kMaxCpus));
    const uint64_t memory = config.memory.size;
    constexpr uint64_t kMinMemory = 64ull << 20;
    if (memory < kMinMemory) throw UsageError("--memory must be at least 64M");
    uint64_t host = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGE_SIZE));
    if (memory > host)
        throw UsageError("--memory " + format_size(memory) + " is more than this host has (" +
                         format_size(host) + ")");
}

}  // namespace mvmm
