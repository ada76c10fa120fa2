#!/usr/bin/env python3
"""A short soak: 4 boots of 64 disks behind root ports through tools/boot-soak, every one classified; any
incident (guest crash or stall, a hung or failing mvmm, a dead test host) fails the test with its report."""

import subprocess
import sys

import guest

BOOTS, DISKS = 4, 64


def test_many_disk_boots_have_no_incident():
    mode, why = guest.boot_mode()
    if mode is None:
        raise guest.SkipTest(why)
    p = subprocess.run([str(guest.REPO / "tools" / "boot-soak"), "--boots", str(BOOTS), "--disks", str(DISKS),
                        "--trim-policies", "drain,adaptive", "--mvmm", guest.mvmm_binary()],
                       capture_output=True, text=True)
    print(p.stdout)
    guest.expect(p.returncode == 0, f"boot-soak exited {p.returncode}:\n{p.stdout}\n{p.stderr[-4000:]}")


if __name__ == "__main__":
    guest.main([test_many_disk_boots_have_no_incident])
