"""Where mvmm's guests boot: directly where this host's /dev/kvm runs standard guests (hardware VMX/SVM), or else
inside the test host VM, a QEMU TCG machine with AMD SVM, Debian's kernel and kvm_amd (TestHost in vm.py; the
command line tools/mvmm-hostvm is cli.py). See guest-images/README.md, "The test host"."""

import os
import re
import shutil
from pathlib import Path

from mvmmtools import REPO
from mvmmtools.images.build import QEMU_BINARY

DEFAULT_MVMM = REPO / "build" / "vmm" / "mvmm"
# Debian's QEMU as the side-by-side peer of mvmm, in the test host or directly (PEER_QEMU in a scenario); its threads
# named ("CPU 0/KVM", "worker", ...), as mvmm's are, so that a per-thread CPU count tells vCPUs from the rest.
PEER_QEMU = [str(QEMU_BINARY), "-accel", "kvm", "-M", "q35", "-cpu", "host", "-nographic", "-no-reboot",
             "-name", "peer,debug-threads=on"]
EXIT_HUNG, EXIT_FIXTURE = 124, 125  # nothing ended within the time limit; the test host could not run the command
HOST_CPUS = 1  # the test host's CPUs: guest-images/README.md says why one


class Fixture(Exception):
    """The test host could not run the command (exit 125)."""


def direct_kvm_usable():
    """True where /dev/kvm runs standard guests (hardware VMX/SVM, not PVM): no test host VM is needed."""
    if Path("/sys/module/kvm_pvm").exists() or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    return re.search(r"\b(vmx|svm)\b", Path("/proc/cpuinfo").read_text()) is not None


def boot_mode():
    """('direct' or 'hostvm', None), or (None, the reason nothing can boot here)."""
    if direct_kvm_usable():
        return "direct", None
    if shutil.which("qemu-system-x86_64"):
        return "hostvm", None
    return None, "no usable /dev/kvm (missing or PVM) and no qemu-system-x86_64 for the test host VM"


def disk_device(index):
    """The test host's device for its index-th outer disk image (vda, vdb, ...)."""
    return f"/dev/vd{chr(ord('a') + index)}"
