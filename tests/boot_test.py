#!/usr/bin/env python3
"""Real guest boots of the default guest: init reached, all CPUs online, exit codes for poweroff and reset."""

import guest
from guest import Run, expect, guest_args


def test_boot_two_cpus_and_poweroff():
    powered_off = Run(guest_args("mvmm.script=markers", cpus=2))
    rebooted = Run(guest_args("mvmm.script=markers mvmm.action=reboot"))
    guest.run_all([powered_off, rebooted])

    r = powered_off
    expect(r.markers("init"), "the guest never reached /init", r)
    cpus = r.markers("cpus")
    expect(cpus and cpus[0][1].get("online") == "2", f"expected 2 CPUs online, saw {cpus}", r)
    expect(r.markers("poweroff"), "the guest did not get to power off", r)
    expect(r.code == 0, f"mvmm exited {r.code} after a poweroff, expected 0", r)
    # Its output goes to a file here (in the test host, through a console that is a terminal there).
    expect("mvmm: info" in r.output and "mvmm: \x1b[" not in r.output, "mvmm's log lines are coloured", r)

    r = rebooted
    expect(r.markers("reboot"), "the guest did not get to reboot", r)
    expect(r.code == 3, f"mvmm exited {r.code} after a guest reset, expected 3", r)


if __name__ == "__main__":
    guest.main([test_boot_two_cpus_and_poweroff])
