// What the user asked for on the command line, as plain values (command_line.h fills it,
// validate.h checks it).
#pragma once

#include <cstdint>
#include <string>

#include "mem/ram_config.h"
#include "rcu/trim_policy.h"
#include "vmm/cli/options.h"

namespace mvmm {

struct SerialConfig {
    enum class Kind { Stdio, File } kind = Kind::Stdio;
    std::string path;  // for File
};

struct Config {
    std::string kernel;
    std::string initrd;
    std::string cmdline = "console=ttyS0";
    RamConfig memory{.size = 512ull << 20};
    unsigned cpus = 1;
    SerialConfig serial;
    std::string log_level = "info";
    rcu::TrimConfig trim;
    DiskOptions disks;  // virtio-blk disks, SCSI controllers with their LUNs
    SlotSource request_alloc = SlotSource::pool;  // given to every disk and controller
    unsigned empty_root_ports = 0;                // --root-ports: empty hot-pluggable slots
    unsigned io_threads = 0;                      // 0: IoThreads::default_count(cpus)
    std::string api_socket;                       // empty: no management socket
    unsigned vcpu_watchdog = 0;                   // seconds; 0: off
    std::string report;                           // empty: no boot report (--report FILE)
};

}  // namespace mvmm
