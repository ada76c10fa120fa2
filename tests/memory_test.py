#!/usr/bin/env python3
"""Real guest boots on preallocated guest RAM: 1 GiB anonymous, 256 MiB of 2 MiB hugepages, and the clear error
(exit 2, no SIGBUS) when the hugepages are not there."""

import guest
from guest import Run, expect, guest_args


def test_preallocated_guests_boot_and_missing_hugepages_fail_cleanly():
    anonymous = Run(guest_args("mvmm.script=markers", memory="size=1G,prealloc=on,prealloc-threads=2", cpus=2))
    hugepages = Run(guest_args("mvmm.script=markers", memory="size=256M,hugepages=2M,prealloc=on"),
                    hugepages=160)
    populate_touch = Run(guest_args("mvmm.script=markers",
                                    memory="size=256M,hugepages=2M,prealloc=on,prealloc-method=touch"),
                         hugepages=160)
    too_few = Run(guest_args("mvmm.script=markers", memory="size=256M,hugepages=2M,prealloc=on"), hugepages=16)
    guest.run_all([anonymous, hugepages, populate_touch, too_few])

    for r in (anonymous, hugepages, populate_touch):
        expect(r.markers("init") and r.markers("poweroff"), "the guest did not boot to poweroff", r)
        expect(r.code == 0, f"mvmm exited {r.code}", r)
    r = too_few
    expect(r.code == 2, f"mvmm exited {r.code} with too few hugepages, expected 2", r)
    expect("hugepage" in r.output and "SIGBUS" not in r.output and not r.markers("init"),
           "no clear hugepage error", r)


if __name__ == "__main__":
    guest.main([test_preallocated_guests_boot_and_missing_hugepages_fail_cleanly])
