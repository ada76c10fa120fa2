// The command line checked against the files it names and the host, before /dev/kvm is opened:
// what comes out is a plan the builder can follow without failing on the user's input again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vmm/boot/bzimage.h"
#include "vmm/cli/config.h"

namespace mvmm {

// A checked boot: the configuration, and the kernel and initrd read (once) and parsed.
struct BootPlan {
    Config config;
    std::vector<uint8_t> kernel_file;
    boot::BzImage kernel;         // a view of kernel_file
    std::vector<uint8_t> initrd;  // empty without --initrd

    BootPlan(Config config, std::vector<uint8_t> kernel_file, std::vector<uint8_t> initrd);
    // Moves keep `kernel` valid (a vector's bytes do not move with it); copies would not.
    BootPlan(BootPlan&&) = default;
    BootPlan(const BootPlan&) = delete;
    BootPlan& operator=(const BootPlan&) = delete;
};

// Checks what can be checked without KVM: files readable (and read), the kernel a bzImage that
// takes the command line and the initrd, counts in range, files and sockets creatable, the RAM
// the host can give.  Throws UsageError naming the option.
BootPlan validate(Config config);

// The whole file; throws UsageError naming `what` when it cannot be read.
std::vector<uint8_t> read_file(const std::string& path, const std::string& what);

}  // namespace mvmm
