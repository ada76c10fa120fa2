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

uint64_t parse_size(const std::string& text) {
    size_t pos = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos == 0 || pos + 1 < text.size())
        throw UsageError("'" + text + "' is not a size (examples: 512M, 2G)");
    uint64_t value = std::strtoull(text.substr(0, pos).c_str(), nullptr, 10);
    unsigned shift = 0;
    if (pos < text.size()) {
        switch (std::toupper(static_cast<unsigned char>(text[pos]))) {
            case 'K':
                shift = 10;
                break;
            case 'M':
                shift = 20;
                break;
            case 'G':
                shift = 30;
                break;
            case 'T':
                shift = 40;
                break;
            default:
                throw UsageError("'" + text + "' has an unknown size suffix (use K, M, G or T)");
        }
    }
    if (value > (UINT64_MAX >> shift)) throw UsageError("size '" + text + "' is too large");
    return value << shift;
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
    app.add_option("--memory", config.memory, "guest RAM size, e.g. 512M or 2G")
        ->capture_default_str();
    app.add_option("--cpus", config.cpus, "number of vCPUs")->capture_default_str();
    std::string serial = "stdio";
    app.add_option("--serial", serial, "where COM1 goes: stdio or file:PATH")
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
    uint64_t memory = parse_size(config.memory);
    constexpr uint64_t kMinMemory = 64ull << 20;
    if (memory < kMinMemory) throw UsageError("--memory must be at least 64M");
    if (memory % 4096) throw UsageError("--memory must be a multiple of 4 KiB");
    uint64_t host = uint64_t(::sysconf(_SC_PHYS_PAGES)) * uint64_t(::sysconf(_SC_PAGE_SIZE));
    if (memory > host)
        throw UsageError("--memory " + config.memory + " is more than this host has (" +
                         std::to_string(host >> 20) + " MiB)");
}

}  // namespace mvmm
