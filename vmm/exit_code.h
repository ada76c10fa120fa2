// mvmm's exit codes (documented in README.md).
#pragma once

namespace mvmm {

enum ExitCode : int {
    kExitPowerOff = 0,       // the guest powered off (ACPI S5)
    kExitInternalError = 1,  // mvmm itself failed (a KVM call, an I/O thread)
    kExitUsage = 2,          // bad command line, unusable files, or a host that cannot run guests
    kExitGuestReset = 3,     // the guest asked for a reset (reboot)
    kExitGuestCrash = 4,     // triple fault or a vCPU state KVM could not run
    kExitSignalBase = 128,   // + SIGINT or SIGTERM: stopped cleanly by that signal (130, 143)
};

}  // namespace mvmm
