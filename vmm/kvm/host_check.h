// Can this host run a standard guest?  Checked before /dev/kvm is opened.
#pragma once

#include <optional>
#include <string>

namespace mvmm {

// Why standard guests cannot run here, or nothing when they can.  `sysfs_module` is where
// kernel modules show up (a parameter so tests can fake a host).
std::optional<std::string> host_cannot_run_guests(const std::string& sysfs_module = "/sys/module",
                                                  const std::string& kvm_device = "/dev/kvm");

}  // namespace mvmm
