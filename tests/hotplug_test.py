#!/usr/bin/env python3
"""Disk hot-plug in a running guest (issue 27): add-disk and remove-disk over the management socket, with Linux's
pciehp on the other side (guest-images/scripts/hotplug, driven by tools/mvmmtools/bench/hotplug_cycles.sh).

- 200 add/remove cycles of a virtio-blk disk (MVMM_HOTPLUG_CYCLES overrides): the guest writes and reads each disk
  while it is present; mvmm's fd count, RSS and heap Rss stay flat after a warm-up; the trim policy changes half way
  (set-memory-policy) and the report shows when; no BAR of a removed disk is left in the MMIO space after any
  cycle.
- The attention button (remove-disk) with the guest writing: every write the guest saw complete is in the image;
  bad requests (unknown id, a path that does not open, a SCSI LUN, an unknown key, a second removal, no free port)
  get error replies and change nothing."""

import json
import os
import re
import tempfile

import guest
from guest import REPO, Run, expect, guest_args

MiB = 1 << 20
CYCLES = int(os.environ.get("MVMM_HOTPLUG_CYCLES", "200"))
WARM_UP = min(20, CYCLES // 4)
SOCKET = "/tmp/mvmm-hotplug.sock"
REPORT = "/tmp/mvmm-hotplug-report.json"
COMPANION = (Path(__file__).resolve().parent.parent / "tools" / "bench" / "hotplug_cycles.sh").read_text()


def hotplug_run(cmdline, companion, ports=2, extra=()):
    scratch = tempfile.mkdtemp(prefix="mvmm-hotplug-")
    images = {f"{scratch}/d{i}.img": 16 * MiB for i in range(2)}
    args = guest_args(cmdline, extra=["--root-ports", str(ports), "--api-socket", SOCKET, "--report", REPORT,
                                      "--trim-policy", "batch", *extra])
    return Run(args, scratch_images=images, companion=f"HP_DIR={scratch}; HP_SOCKET={SOCKET}\n" + companion,
               after=f"cat {REPORT}"), scratch


def cycles(run):
    rows = []
    for m in re.finditer(r"HP-CYCLE (.*)", run.companion_output):
        rows.append({k: int(v) for k, v in (kv.split("=", 1) for kv in m.group(1).split())})
    return rows


def cycles_run():
    # The policy changes half way: the cycles run in two halves.
    half = CYCLES // 2
    companion = (f"HP_CYCLES={half}; HP_MODE=eject\n" + COMPANION +
                 'echo "POLICY $(ctl set-memory-policy trim-policy=adaptive trim-factor=50)"\n' +
                 f"HP_FIRST={half}; HP_CYCLES={CYCLES}\n" + COMPANION)
    run, _ = hotplug_run(f"mvmm.script=hotplug mvmm.cycles={CYCLES}", companion)
    return run


# Bad requests first (each must change nothing), then one cycle in which the guest writes while the host presses
# the attention button, then the image is checked for every write the guest saw complete.
INFLIGHT = r"""
disks_now() { ctl query-disks; }
until grep -q "hotplug-start" "$MVMM_LOG"; do sleep 0.1; done
before=$(disks_now)
echo "BAD unknown-id $(ctl remove-disk id=disk77)"
echo "BAD no-file $(ctl add-disk path=/no/such.img)"
echo "BAD lun $(ctl add-disk path=$HP_DIR/d0.img controller=c0)"
echo "BAD key $(ctl add-disk path=$HP_DIR/d0.img colour=red)"
echo "BAD root-bus $(ctl add-disk path=$HP_DIR/d0.img bus=root)"
[ "$(disks_now)" = "$before" ] && echo "UNCHANGED yes" || echo "UNCHANGED no: $before / $(disks_now)"
ctl add-disk path=$HP_DIR/d0.img serial=inflight >/dev/null
echo "BAD no-port $(ctl add-disk path=$HP_DIR/d1.img)"
until grep -q "hotplug-written [0-9.]* i=0 block=20 " "$MVMM_LOG"; do sleep 0.05; done
echo "REMOVE $(ctl remove-disk id=disk0)"
echo "BAD twice $(ctl remove-disk id=disk0)"
while ctl query-disks | grep -q '"id":"disk0"'; do sleep 0.05; done
checked=0
for k in $(sed -n 's/.*hotplug-written [0-9.]* i=0 block=\([0-9]*\).*/\1/p' "$MVMM_LOG"); do
	got=$(dd if=$HP_DIR/d0.img bs=4096 skip=$k count=1 2>/dev/null | head -c 32 | head -1)
	[ "$got" = "MVMM-BLOCK-0-$k" ] || echo "LOST block=$k got=$got"
	checked=$((checked + 1))
done
echo "CHECKED $checked"
"""


def test_hotplug_cycles_leak_nothing():
    run = cycles_run()
    guest.run_all([run], timeout=3600)
    expect(run.code == 0, f"mvmm exited {run.code}", run)
    ready = run.markers("hotplug-ready")
    expect(len(ready) == CYCLES and all(m["ok"] == "1" for _, m in ready),
           f"{len(ready)} of {CYCLES} disks were written and read back", run)
    rows = cycles(run)
    expect(len(rows) == CYCLES and "HP-ERROR" not in run.companion_output,
           f"{len(rows)} of {CYCLES} cycles:\n{run.companion_output[-3000:]}", run)
    steady = rows[WARM_UP:]
    fds = {r["fds"] for r in steady}
    expect(len(fds) == 1, f"mvmm's fd count moved after {WARM_UP} cycles: {sorted(fds)}")
    for key, limit in (("rss_kib", 2048), ("heap_kib", 2048)):
        growth = steady[-1][key] - min(r[key] for r in steady)
        expect(growth <= limit, f"{key} grew by {growth} over cycles {WARM_UP}-{CYCLES - 1} (limit {limit})")
    report = json.loads(run.after_output)
    changes = report["trim"]["policy_changes"]
    expect([c["policy"] for c in changes] == ["batch", "adaptive"] and changes[1]["factor"] == 50,
           f"policy changes in the report: {changes}")
    stale = [r["i"] for r in rows if r["bars"] != 0]
    expect(not stale, f"BARs left in the MMIO space after cycles {stale[:10]}")
    times = sorted(r["ms"] for r in steady)
    print(f"{CYCLES} cycles: median {times[len(times) // 2]} ms, fds {fds.pop()}, "
          f"rss {steady[0]['rss_kib']}->{steady[-1]['rss_kib']} KiB, trims {rows[-1]['trims']}")


def reply(run, tag):
    m = re.search(rf"^{tag} (\{{.*\}})\s*$", run.companion_output, re.M)
    expect(m, f"no {tag} reply:\n{run.companion_output}", run)
    return json.loads(m.group(1))


def test_button_removal_with_writes_in_flight_and_bad_requests():
    run, _ = hotplug_run("mvmm.script=hotplug mvmm.cycles=1 mvmm.hotplug=inflight", INFLIGHT, ports=1)
    guest.run_all([run], timeout=900)
    expect(run.code == 0, f"mvmm exited {run.code}", run)
    for what in ("unknown-id", "no-file", "lun", "key", "root-bus", "no-port", "twice"):
        expect("error" in reply(run, f"BAD {what}"), f"{what}: not an error reply", run)
    expect("UNCHANGED yes" in run.companion_output, "a bad request changed the disks:\n" + run.companion_output)
    expect(reply(run, "REMOVE")["return"]["state"] == "removing", "remove-disk was refused", run)
    expect("LOST" not in run.companion_output, "completed writes are missing:\n" + run.companion_output, run)
    checked = re.search(r"CHECKED (\d+)", run.companion_output)
    expect(checked and int(checked.group(1)) > 20, "the guest completed too few writes:\n" + run.companion_output)
    expect(run.markers("hotplug-gone"), "the guest never saw the disk go", run)


if __name__ == "__main__":
    guest.main([test_hotplug_cycles_leak_nothing, test_button_removal_with_writes_in_flight_and_bad_requests])
