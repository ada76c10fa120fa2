#include "vmm/cli/validate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>

#include "devices/pci/host_bridge.h"
#include "mem/guest_ram.h"
#include "vmm/api/server.h"
#include "vmm/cli/usage_error.h"
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
void check_initrd(const std::string& path, const boot::BzImage& kernel, uint64_t initrd_bytes,
                  uint64_t memory) {
    const auto low_ram = layout::ram_ranges(memory).front();
    try {
        boot::place_initrd(kernel, initrd_bytes, low_ram.base.value() + low_ram.size);
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
        throw UsageError("--disk, --scsi-controller, --root-ports: " + std::to_string(on_root) +
                         " virtio-blk disks and SCSI controllers on bus=root and " +
                         std::to_string(root_ports) +
                         " root ports do not fit on PCI bus 0 (31 slots: bus=root takes a slot, "
                         "root ports take eight to a slot)");
}

boot::BzImage parse_kernel(const std::string& path, std::span<const uint8_t> file) {
    try {
        return boot::parse_bzimage(file);
    } catch (const boot::BootError& e) {
        throw UsageError("--kernel '" + path + "': " + e.what());
    }
}

void check_cmdline(const boot::BzImage& kernel, const std::string& cmdline) {
    try {
        boot::check_cmdline(kernel, cmdline);
    } catch (const boot::BootError& e) {
        throw UsageError(std::string("--cmdline: ") + e.what());
    }
}

void check_memory_size(uint64_t memory) {
    constexpr uint64_t kMinMemory = 64ull << 20;
    if (memory < kMinMemory) throw UsageError("--memory must be at least 64M");
    const uint64_t host = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGE_SIZE));
    if (memory > host)
        throw UsageError("--memory " + format_size(memory) + " is more than this host has (" +
                         format_size(host) + ")");
}

}  // namespace

BootPlan::BootPlan(Config config_, std::vector<uint8_t> kernel_file_, std::vector<uint8_t> initrd_)
    : config(std::move(config_)),
      kernel_file(std::move(kernel_file_)),
      kernel(parse_kernel(config.kernel, kernel_file)),
      initrd(std::move(initrd_)) {}

std::vector<uint8_t> read_file(const std::string& path, const std::string& what) {
    check_readable_file(what, path);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UsageError(what + " '" + path + "' cannot be read");
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

BootPlan validate(Config config) {
    std::vector<uint8_t> initrd;
    auto kernel_file = read_file(config.kernel, "--kernel");
    if (!config.initrd.empty()) initrd = read_file(config.initrd, "--initrd");
    BootPlan plan(std::move(config), std::move(kernel_file), std::move(initrd));
    const Config& c = plan.config;
    check_cmdline(plan.kernel, c.cmdline);
    if (c.cpus == 0 || c.cpus > kMaxCpus)
        throw UsageError("--cpus must be between 1 and " + std::to_string(kMaxCpus));
    check_memory_size(c.memory.size);
    check_ram(c.memory);
    if (!c.initrd.empty()) check_initrd(c.initrd, plan.kernel, plan.initrd.size(), c.memory.size);
    check_pci(c.disks, c.empty_root_ports);
    if (c.serial.kind == SerialConfig::Kind::File)
        check_writable_file("--serial file", c.serial.path);
    if (!c.api_socket.empty()) check_api_socket(c.api_socket);
    if (!c.report.empty()) check_writable_file("--report", c.report);
    return plan;
}

}  // namespace mvmm
