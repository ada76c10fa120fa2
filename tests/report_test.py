#!/usr/bin/env python3
"""mvmm --report on real guest boots: a clean 2-disk boot gives a complete document that agrees with the exit stats
line, and a guest that crashes (exit 4) still gets its report.

The crash is a real guest kernel panic: `rdinit=/nonexistent` leaves the kernel without an init in its
initramfs and no root device, so it panics ("VFS: Unable to mount root fs"); `panic=-1` restarts at once and
`reboot=t` makes that restart a triple fault, which mvmm reports as a guest crash (KVM_EXIT_SHUTDOWN, exit 4)."""

import json
import re
import tempfile

import guest
from guest import Run, expect, guest_args

MiB = 1 << 20
DISKS = 2
CRASH_CMDLINE = "rdinit=/nonexistent panic=-1 reboot=t"


def reported(args, name, **kw):
    path = f"{tempfile.gettempdir()}/mvmm-report-test-{name}.json"
    return Run(args + ["--report", path], after=f"cat {path}; rm -f {path}", **kw)


def document(run):
    try:
        return json.loads(run.after_output)
    except ValueError as e:
        raise AssertionError(f"no readable report ({e}):\n{run.after_output[:2000]}\n--- output ---\n"
                             + run.output[-3000:])


def exit_stats(run):
    m = re.search(r"exit stats: (.*)", run.output)
    expect(m, "mvmm printed no exit stats", run)
    return {k: (int(v) if v.isdigit() else v) for k, v in (kv.split("=", 1) for kv in m.group(1).split())}


def check_clean_boot(run):
    expect(run.code == 0, f"mvmm exited {run.code}", run)
    doc = document(run)
    expect(doc["format"] == "mvmm-boot-report" and doc["version"] == 1, f"format {doc['format']}", run)
    expect(doc["exit"] == {"code": 0, "reason": "the guest powered off"}, f"exit {doc['exit']}", run)
    t = doc["timeline"]
    order = ["ram_ready", "devices_ready", "guest_loaded", "first_kvm_run", "first_serial_byte", "guest_stopped",
             "exit"]
    expect(all(t[k] is not None for k in order), f"phases missing: {t}", run)
    expect([t[k] for k in order] == sorted(t[k] for k in order), f"phases out of order: {t}", run)
    names = [m["name"] for m in doc["marks"]]
    expect(names[0] == "init" and names.count("disk") == DISKS and names[-1] == "poweroff", f"marks {names}", run)
    expect(t["first_kvm_run"] < doc["marks"][0]["t"] < t["guest_stopped"], "init marker outside the boot", run)
    mem = doc["memory"]
    expect(mem["peak_rss_bytes"] > mem["guest_resident_bytes"] > 0 and mem["vmm_peak_rss_bytes"] > 0,
           f"memory {mem}", run)
    heap = mem["heap_after_disks"]
    expect(heap and heap["after_mark"] == "cpus" and heap["rss_bytes"] > 0, f"heap after disks {heap}", run)
    expect(mem["heap_at_exit"]["rss_bytes"] > 0, "no heap at exit", run)
    exits = doc["vm_exits"]
    expect(exits["total"] > 0 and exits["by_device"].get("com1", 0) > 0, f"VM exits {exits}", run)
    expect(doc["rcu"]["batches"] >= 1 and doc["address_spaces"]["mmio"]["rebuilds"] >= 1, "no RCU work", run)
    # Each disk's own timeline, without any help from the guest: DRIVER_OK, then its first notify.
    devices = t["devices"]
    expect(len(devices) == DISKS and all(d["name"].startswith("disk ") for d in devices), f"devices {devices}", run)
    expect(all(t["first_kvm_run"] < d["driver_ok"] <= d["first_notify"] < t["guest_stopped"] for d in devices),
           f"device times out of order: {devices}", run)
    alloc = doc["request_allocation"]
    queues = [q for d in alloc["devices"] for q in d["queues"]]
    expect(alloc["mode"] == "pool" and len(alloc["devices"]) == DISKS and queues, f"request allocation {alloc}", run)
    # A queue per vCPU (the guest has 2); the guest's few requests may all go to one of a disk's queues.
    expect(all(len(d["queues"]) == 2 for d in alloc["devices"]), f"not a queue per vCPU: {alloc}", run)
    expect(all(q["slots"] > 0 and q["peak_slots_in_use"] <= q["slots"] for q in queues)
           and all(any(q["peak_slots_in_use"] >= 1 and q["pool_resident_bytes"] > 0 for q in d["queues"])
                   for d in alloc["devices"])
           and alloc["slots"] == sum(q["slots"] for q in queues),
           f"request pools {alloc}", run)
    stats = exit_stats(run)
    expect(stats["vm_exits"] == exits["total"] and stats["trims"] == doc["trim"]["by_policy"]["trims"]
           and stats["peak_rss_kib"] == mem["peak_rss_bytes"] >> 10, f"exit stats {stats} disagree", run)
    print("clean boot:", json.dumps({"timeline_ms": {k: round(t[k] / 1e6) for k in order},
                                     "vmm_peak_rss_kib": mem["vmm_peak_rss_bytes"] >> 10,
                                     "heap_after_disks_kib": heap["rss_bytes"] >> 10,
                                     "vm_exits": exits["by_kind"]}))


def check_crash(run):
    expect(run.code == 4, f"mvmm exited {run.code}, not 4 (guest crash)", run)
    expect("Kernel panic" in run.output, "the guest kernel did not panic", run)
    doc = document(run)
    expect(doc["exit"]["code"] == 4 and "triple" in doc["exit"]["reason"], f"exit {doc['exit']}", run)
    t = doc["timeline"]
    expect(t["first_kvm_run"] < t["first_serial_byte"] < t["guest_stopped"] < t["exit"], f"timeline {t}", run)
    expect(doc["marks"] == [] and doc["vm_exits"]["by_kind"].get("shutdown") == 1, "marks or exits", run)
    print("crash:", doc["exit"])


def test_report_of_a_clean_boot_and_of_a_guest_crash():
    scratch = tempfile.mkdtemp(prefix="mvmm-report-")
    images = {f"{scratch}/disk{i}.img": MiB for i in range(DISKS)}
    disks = [w for path in images for w in ("--disk", f"path={path}")]
    clean = reported(guest_args("mvmm.script=markers", cpus=2, extra=disks), "clean", scratch_images=images)
    crash = reported(guest_args(CRASH_CMDLINE), "crash")
    guest.run_all([clean, crash], timeout=900)
    check_clean_boot(clean)
    check_crash(crash)


if __name__ == "__main__":
    guest.main([test_report_of_a_clean_boot_and_of_a_guest_crash])
