#!/usr/bin/env python3
"""Disk hot-plug in a running guest (issue 27): add-disk and remove-disk over the management socket, with Linux's
pciehp on the other side (guest-images/scripts/hotplug, driven by tools/mvmmtools/bench/hotplug_cycles.sh).

- 100 add/remove cycles of a virtio-blk disk (the issue's 200 with MVMM_HOTPLUG_CYCLES=200: see CYCLES), a raw
  image and a qcow2 image qemu-img made in turn: the guest writes and reads each disk while it is present, and
  after mvmm's exit `qemu-img check` finds the qcow2 image clean and `qemu-img convert` reads the guest's last
  line from it (issue 25: a hot-added qcow2 disk); mvmm's fd count, heap Rss and RSS beyond guest RAM stay
  flat after a warm-up; the trim policy changes half way
  (set-memory-policy) and the report shows when; no BAR of a removed disk is left in the MMIO space after any
  cycle. Then LUN_CYCLES cycles of a SCSI LUN added to and removed from the boot's controller (add-disk
  controller=c0, remove-disk c0:T:1), on target 0 and on target 1 in turn (target 1 has no LUN at boot: the
  controller reserves it with targets=2): Linux finds the new /dev/sdX on the RESCAN event, writes and reads a line,
  loses the disk on the REMOVED event; the line is in each LUN's image after mvmm's exit, and mvmm's fd count after
  each removal is what it was before the first add (the image closed); its heap Rss, malloc and RSS stay flat
  over the LUN cycles too.
- The attention button (remove-disk) with the guest writing (O_DIRECT, no flush): every write the guest saw
  complete is in the image once the disk is released (mvmm flushed it; in the test host nothing else would);
  bad requests (unknown id, a path that does not open, a LUN of a controller that does not exist, an unknown key,
  a second removal, no free port)
  get error replies and change nothing."""

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import guest
from guest import REPO, Run, expect, guest_args

MiB = 1 << 20
# The issue asks for 200 cycles; at ~1.3 s each in the TCG test host they take 5 minutes, so CI runs 100
# (MVMM_HOTPLUG_CYCLES=200 for the whole count).
CYCLES = int(os.environ.get("MVMM_HOTPLUG_CYCLES", "100"))
WARM_UP = min(20, CYCLES // 4)
# LUN cycles: 3 in CI (they follow the disks' cycles); MVMM_HOTPLUG_LUN_CYCLES=200 for the issue's count.
LUN_CYCLES = int(os.environ.get("MVMM_HOTPLUG_LUN_CYCLES", "3"))
SOCKET = "/tmp/mvmm-hotplug.sock"
REPORT = "/tmp/mvmm-hotplug-report.json"
COMPANION = (REPO / "tools" / "mvmmtools" / "bench" / "hotplug_cycles.sh").read_text()


def hotplug_run(cmdline, companion, ports=2, luns=0, after=""):
    scratch = tempfile.mkdtemp(prefix="mvmm-hotplug-")
    images = {f"{scratch}/d{i}.img": 16 * MiB for i in range(2)}
    extra = []
    if luns:  # a controller with one LUN at boot; the cycles add LUN 1 beside it
        images.update({f"{scratch}/l{i}.img": MiB for i in range(luns)})
        images[f"{scratch}/boot-lun.img"] = MiB
        extra = ["--scsi-controller", "id=c0,targets=2", "--disk", f"path={scratch}/boot-lun.img,controller=c0"]
    args = guest_args(cmdline, extra=["--root-ports", str(ports), "--api-socket", SOCKET, "--report", REPORT,
                                      "--trim-policy", "batch", *extra])
    return Run(args, scratch_images=images, companion=f"HP_DIR={scratch}; HP_SOCKET={SOCKET}\n" + companion,
               after=f"cat {REPORT}; echo\nHP_DIR={scratch}\n{after}")


def report_of(run):
    """mvmm's --report, the first thing `after` printed."""
    return json.JSONDecoder().raw_decode(run.after_output)[0]


def cycles(run):
    rows = []
    for m in re.finditer(r"HP-CYCLE (.*)", run.companion_output):
        rows.append({k: int(v) for k, v in (kv.split("=", 1) for kv in m.group(1).split())})
    return rows


# The guest waits for the host to end the VM (guest-images/scripts/hotplug); a VMM that exited early fails the test
# at once with what it said.
QUIT = """
until grep -q "MVMM-MARK hotplug-done" "$MVMM_LOG"; do kill -0 "$MVMM_PID" 2>/dev/null || break; sleep 0.1; done
echo "QUIT $(ctl quit)"
"""


# The odd cycles' disk is a qcow2 image (mvmm finds the format in its header); after mvmm's exit, qemu-img's
# verdict on it and the guest's last line in it.
QCOW2_FIRST = 'qemu-img create -q -f qcow2 "$HP_DIR/d1.img" 16M\n'
QCOW2_AFTER = r"""
qemu-img check "$HP_DIR/d1.img" >/dev/null 2>&1; echo "QCOW2-CHECK $?"
qemu-img convert -O raw "$HP_DIR/d1.img" "$HP_DIR/d1.raw" && echo "QCOW2-LINE $(head -n 1 "$HP_DIR/d1.raw")"
"""


# The LUN cycles, after the virtio-blk ones (the companion's ctl and pid): add LUN 1 of target j % 2 to controller c0,
# wait for the guest's lun-ready, remove it, wait until query-disks no longer lists it (its image closed) and the
# guest saw it go; one line each with mvmm's fd count, RSS, heap and malloc figures (hotplug_cycles.sh's), and the fd
# count before the first add.
LUN_COMPANION = r"""
echo "HP-LUN-BEFORE fds=$(ls /proc/"$pid"/fd | wc -l)"
j=0
while [ $j -lt "$HP_LUNS" ]; do
	reply=$(ctl add-disk "path=$HP_DIR/l$j.img" controller=c0 target=$((j % 2)) lun=1 "serial=lun$j") ||
		{ echo "HP-ERROR lun $j could not be added: $reply"; break; }
	id=$(echo "$reply" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
	until grep -qE "lun-ready [0-9.]+ i=$j " "$MVMM_LOG"; do
		kill -0 "$pid" 2>/dev/null || break 2
		sleep 0.02
	done
	ctl remove-disk "id=$id" >/dev/null || echo "HP-ERROR lun $j removal refused"
	while ctl query-disks | grep -q "\"id\":\"$id\""; do sleep 0.02; done
	until grep -qE "lun-gone [0-9.]+ i=$j([^0-9]|$)" "$MVMM_LOG"; do
		kill -0 "$pid" 2>/dev/null || break 2
		sleep 0.02
	done
	disks=$(ctl query-disks)
	echo "HP-LUN i=$j id=$id fds=$(ls /proc/"$pid"/fd | wc -l) vmm_rss_kib=$(vmm_rss_kib "$pid")" \
		"heap_kib=$(heap_kib "$pid") $(counters)"
	j=$((j + 1))
done
"""
# After mvmm's exit, each LUN's first line.
LUN_AFTER = r"""
for f in "$HP_DIR"/l*.img; do echo "LUN-LINE ${f##*/} $(head -n 1 "$f")"; done
"""


def cycles_run():
    # The policy changes half way: the cycles run in two halves.
    half = CYCLES // 2
    companion = (QCOW2_FIRST + f"HP_CYCLES={half}; HP_MODE=eject\n" + COMPANION +
                 'echo "POLICY $(ctl set-memory-policy trim-policy=adaptive trim-factor=50)"\n' +
                 f"HP_FIRST={half}; HP_CYCLES={CYCLES}\n" + COMPANION +
                 f"HP_LUNS={LUN_CYCLES}\n" + LUN_COMPANION + QUIT)
    run = hotplug_run(f"mvmm.script=hotplug mvmm.cycles={CYCLES} mvmm.luns={LUN_CYCLES}", companion,
                      luns=LUN_CYCLES, after=QCOW2_AFTER + LUN_AFTER)
    run.binaries = [shutil.which("qemu-img")]
    run.run_timeout = 120 + 5 * (CYCLES + LUN_CYCLES)  # a hang guard: a boot, and cycles of ~1.3 s here
    return run


# Bad requests first (each must change nothing), then one cycle in which the guest writes while the host presses
# the attention button ($HP_DISK: the outer image, whose blocks the test reads afterwards).
INFLIGHT = r"""
ctl() { "$MVMM_CTL" --socket "$HP_SOCKET" --wait 120 "$@"; }
disks_now() { ctl query-disks; }
until grep -q "hotplug-start" "$MVMM_LOG"; do sleep 0.1; done
before=$(disks_now)
echo "BAD unknown-id $(ctl remove-disk id=disk77)"
echo "BAD no-file $(ctl add-disk path=/no/such.img)"
echo "BAD no-controller $(ctl add-disk path=$HP_DIR/d0.img controller=c0)"
echo "BAD key $(ctl add-disk path=$HP_DIR/d0.img colour=red)"
echo "BAD root-bus $(ctl add-disk path=$HP_DIR/d0.img bus=root)"
[ "$(disks_now)" = "$before" ] && echo "UNCHANGED yes" || echo "UNCHANGED no: $before / $(disks_now)"
ctl add-disk path=$HP_DISK serial=inflight >/dev/null
echo "BAD no-port $(ctl add-disk path=$HP_DIR/d1.img)"
until grep -qE "hotplug-written [0-9.]+ i=0 block=20([^0-9]|$)" "$MVMM_LOG"; do sleep 0.05; done
echo "REMOVE $(ctl remove-disk id=disk0)"
echo "BAD twice $(ctl remove-disk id=disk0)"
while ctl query-disks | grep -q '"id":"disk0"'; do sleep 0.05; done
""" + QUIT


def expect_flat(steady, cycles_named):
    """Over 200 cycles here the heap stayed flat and the RSS beyond guest RAM grew ~10 KiB a cycle (not explained
    yet); a disk left behind whole stalls the guest at the next plug, its MSI-X vectors alone show in the fds."""
    for key, limit in (("vmm_rss_kib", 2048 + 16 * len(steady)), ("heap_kib", 2048), ("malloc_kib", 2048)):
        growth = steady[-1][key] - min(r[key] for r in steady)
        expect(growth <= limit, f"{key} grew by {growth} KiB over {cycles_named} (limit {limit})")


def test_hotplug_cycles_leak_nothing():
    run = cycles_run()
    guest.run_all([run], timeout=600 + run.run_timeout)
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
    expect_flat(steady, f"disk cycles {WARM_UP}-{CYCLES - 1}")
    report = report_of(run)
    changes = report["trim"]["policy_changes"]
    expect([c["policy"] for c in changes] == ["batch", "adaptive"] and changes[1]["factor"] == 50,
           f"policy changes in the report: {changes}")
    # The SCSI controller's BAR stays; a removed disk's must not.
    stale = [(r["i"], r["bars"]) for r in rows if r["bars"] != 1]
    expect(not stale, f"BARs left in the MMIO space after cycles (cycle, BARs): {stale[:10]}")
    last_odd = CYCLES - 1 if CYCLES % 2 == 0 else CYCLES - 2
    expect(re.search(r"^QCOW2-CHECK 0\s*$", run.after_output, re.M) and
           re.search(rf"^QCOW2-LINE MVMM-HOTPLUG-{last_odd}\s*$", run.after_output, re.M),
           f"the hot-added qcow2 disk after mvmm's exit (qemu-img check, its first line):\n{run.after_output[-600:]}")
    luns = [{k: v if k == "id" else int(v) for k, v in (kv.split("=", 1) for kv in m.group(1).split())}
            for m in re.finditer(r"HP-LUN (.*)", run.companion_output)]
    before = re.search(r"HP-LUN-BEFORE fds=(\d+)", run.companion_output)
    expect(len(luns) == LUN_CYCLES and before,
           f"{len(luns)} of {LUN_CYCLES} LUN cycles:\n{run.companion_output[-2000:]}", run)
    lun_ready = run.markers("lun-ready")
    expect(len(lun_ready) == LUN_CYCLES and all(m["ok"] == "1" for _, m in lun_ready),
           f"the guest wrote and read back {len(lun_ready)} of {LUN_CYCLES} LUNs: {lun_ready}", run)
    expect(all(r["fds"] == int(before.group(1)) for r in luns),
           f"mvmm's fd count after each LUN removal {[r['fds'] for r in luns]}, before the first {before.group(1)}")
    lun_warm_up = min(WARM_UP, LUN_CYCLES // 4)
    expect_flat(luns[lun_warm_up:], f"LUN cycles {lun_warm_up}-{LUN_CYCLES - 1}")
    expect([r["id"] for r in luns] == [f"c0:{j % 2}:1" for j in range(LUN_CYCLES)],
           f"the LUNs' ids {[r['id'] for r in luns]}: target 0 and the reserved target 1 in turn")
    for j in range(LUN_CYCLES):
        expect(re.search(rf"^LUN-LINE l{j}.img MVMM-LUN-{j}\s*$", run.after_output, re.M),
               f"LUN {j}'s image after mvmm's exit:\n{run.after_output[-600:]}")
    times = sorted(r["ms"] for r in steady)
    print(f"{CYCLES} cycles: median {times[len(times) // 2]} ms, fds {fds.pop()}, "
          f"RSS beyond guest RAM {steady[0]['vmm_rss_kib']}->{steady[-1]['vmm_rss_kib']} KiB, "
          f"heap {steady[0]['heap_kib']}->{steady[-1]['heap_kib']} KiB, "
          f"malloc {steady[0]['malloc_kib']}->{steady[-1]['malloc_kib']} KiB, trims {rows[-1]['trims']}")
    print(f"{LUN_CYCLES} LUN cycles: RSS beyond guest RAM {luns[0]['vmm_rss_kib']}->{luns[-1]['vmm_rss_kib']} KiB, "
          f"heap {luns[0]['heap_kib']}->{luns[-1]['heap_kib']} KiB, "
          f"malloc {luns[0]['malloc_kib']}->{luns[-1]['malloc_kib']} KiB")


def reply(run, tag):
    m = re.search(rf"^{tag} (\{{.*\}})\s*$", run.companion_output, re.M)
    expect(m, f"no {tag} reply:\n{run.companion_output}", run)
    return json.loads(m.group(1))


def test_button_removal_with_writes_in_flight_and_bad_requests():
    with tempfile.TemporaryDirectory(prefix="mvmm-hotplug-") as outer:
        image = f"{outer}/inflight.img"
        with open(image, "wb") as f:
            f.truncate(16 * MiB)
        # In the test host the image is its disk, where only what mvmm flushed reaches the file (Run.flushed_only).
        mode, _ = guest.boot_mode()
        disk = guest.disk_device(0) if mode == "hostvm" else image
        run = hotplug_run("mvmm.script=hotplug mvmm.cycles=1 mvmm.hotplug=inflight",
                             f"HP_DISK={disk}\n" + INFLIGHT, ports=1)
        run.disk_images, run.flushed_only = [image], True
        guest.run_all([run], timeout=900)
        written = Path(image).read_bytes()
    expect(run.code == 0, f"mvmm exited {run.code}", run)
    for what in ("unknown-id", "no-file", "no-controller", "key", "root-bus", "no-port", "twice"):
        expect("error" in reply(run, f"BAD {what}"), f"{what}: not an error reply", run)
    expect("UNCHANGED yes" in run.companion_output, "a bad request changed the disks:\n" + run.companion_output)
    expect(reply(run, "REMOVE")["return"]["state"] == "removing", "remove-disk was refused", run)
    blocks = [int(m["block"]) for _, m in run.markers("hotplug-written")]
    expect(len(blocks) > 20, f"the guest completed only {len(blocks)} writes", run)
    lost = [k for k in blocks if not written[k * 4096:].startswith(f"MVMM-BLOCK-0-{k}\n".encode())]
    expect(not lost, f"{len(lost)} of {len(blocks)} completed writes are not in the image: blocks {lost[:10]}", run)
    expect(run.markers("hotplug-gone"), "the guest never saw the disk go", run)

if __name__ == "__main__":
    guest.main([test_hotplug_cycles_leak_nothing, test_button_removal_with_writes_in_flight_and_bad_requests])
