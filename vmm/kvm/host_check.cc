#include "vmm/kvm/host_check.h"

#include <unistd.h>

#include <filesystem>

namespace mvmm {

std::optional<std::string> host_cannot_run_guests(const std::string& sysfs_module,
                                                  const std::string& kvm_device) {
    const std::string hint =
        "; to try mvmm on such a machine, run it inside the test host VM: "
        "tools/mvmm-hostvm -- <mvmm arguments>";
    if (std::filesystem::exists(sysfs_module + "/kvm_pvm"))
        return "this host's /dev/kvm is PVM (kvm_pvm), which runs only PVM-aware kernels: a "
               "standard Linux guest needs hardware virtualization (VMX or SVM) and would "
               "triple-fault at its first page-table switch" +
               hint;
    if (!std::filesystem::exists(kvm_device))
        return kvm_device +
               " does not exist: this host has no KVM (load kvm_intel or kvm_amd, "
               "or enable virtualization in the firmware)" +
               hint;
    if (::access(kvm_device.c_str(), R_OK | W_OK) != 0)
        return "no permission to open " + kvm_device + " (add yourself to the kvm group)";
    return std::nullopt;
}

}  // namespace mvmm
