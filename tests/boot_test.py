#!/usr/bin/env python3
"""Real guest boots of the default guest: init reached, all CPUs online, exit codes for poweroff and reset."""

import guest
from guest import Run, expect, guest_args


# In the test host: the interrupts of its RTC alarm (guest-images/hostvm/init), a second apart.
RTC_INTERRUPTS = "grep rtc0 /proc/interrupts; sleep 1; grep rtc0 /proc/interrupts"


def rtc_interrupts(line):
    """The count summed over the CPUs in a /proc/interrupts line ' 8:  154  IO-APIC  8-edge  rtc0'."""
    fields = line.split()[1:]
    return sum(int(f) for f in fields[:next(i for i, f in enumerate(fields) if not f.isdigit())])


def test_boot_two_cpus_and_poweroff():
    in_test_host = guest.boot_mode()[0] == "hostvm"
    powered_off = Run(guest_args("mvmm.script=markers", cpus=2), after=RTC_INTERRUPTS if in_test_host else None)
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
    if in_test_host:  # interrupts that a lost wake-up in the outer QEMU cannot stop (guest-images/README.md)
        counts = [rtc_interrupts(line) for line in r.after_output.splitlines() if "rtc0" in line]
        expect(len(counts) == 2 and counts[1] > counts[0],
               f"the test host's RTC alarm did not interrupt within a second: {r.after_output!r}", r)

    r = rebooted
    expect(r.markers("reboot"), "the guest did not get to reboot", r)
    expect(r.code == 3, f"mvmm exited {r.code} after a guest reset, expected 3", r)


if __name__ == "__main__":
    guest.main([test_boot_two_cpus_and_poweroff])
