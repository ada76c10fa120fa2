#!/usr/bin/env python3
"""Real guest boots with many virtio-blk disks: the guest sees every disk with its size (1, 8, 64 disks; 32 behind
32 root ports), data a guest writes and syncs is in the image file after mvmm exits (cache=none, O_DIRECT, too; in
the test host that disk is one of its own block devices, as tmpfs has no O_DIRECT), read-only disks stay
unchanged, and SIGTERM shuts down cleanly (exit 143, socket removed, the guest's unflushed writes flushed by
mvmm: in the test host nothing else writes them back, Run.flushed_only).

  tests/disk_test.py [TEST_NAME]...   (MVMM, MVMM_CTL and PYTHONPATH=tools as meson test sets them; no name: all)"""

import os
import tempfile
from pathlib import Path

import guest
from guest import Run, expect, guest_args

MiB = 1 << 20


def disks_run(count, sizes, bus="rootport"):
    scratch = tempfile.mkdtemp(prefix="mvmm-disks-")
    images = {f"{scratch}/disk{i}.img": sizes(i) for i in range(count)}
    extra = []
    for path in images:
        extra += ["--disk", f"path={path},bus={bus}"]
    return Run(guest_args("mvmm.script=markers", extra=extra), scratch_images=images)


def check_disks(run, expected_sizes):
    disks = run.markers("disk")
    seen = sorted(int(d["size_bytes"]) for _, d in disks)
    expect(run.code == 0, f"mvmm exited {run.code}", run)
    expect(seen == sorted(expected_sizes),
           f"guest saw {len(seen)} disks {seen[:8]}..., expected {len(expected_sizes)}", run)


SOCKET = "/tmp/mvmm-sigterm-test.sock"
# Once the guest wrote and idles: SIGTERM to mvmm, then wait (at most 120 s) for the socket to go.
SIGTERM_CLIENT = f"""
for i in $(seq 600); do grep -q "MVMM-MARK idle" "$MVMM_LOG" && break; sleep 0.5; done
test -S {SOCKET} && echo "SOCKET-WHILE-RUNNING present"
kill -TERM "$MVMM_PID"
for i in $(seq 240); do test -e {SOCKET} || break; sleep 0.5; done
test -e {SOCKET} && echo "SOCKET-AFTER present" || echo "SOCKET-AFTER gone"
"""


def check_sigterm_shutdown(run, images):
    """SIGTERM: exit 143, exit stats logged, socket removed, and the writes the guest made without a flush are in
    the images: in the test host only because mvmm flushed them at its shutdown (directly on this host the page
    cache would show them anyway)."""
    expect(run.code == 143, f"mvmm exited {run.code} on SIGTERM, expected 143", run)
    expect("SIGTERM: shutting down" in run.output and "exit stats:" in run.output,
           "no shutdown or exit stats line", run)
    expect("SOCKET-WHILE-RUNNING present" in run.companion_output and
           "SOCKET-AFTER gone" in run.companion_output, f"socket not removed:\n{run.companion_output}", run)
    written = {d["disk"] for _, d in run.markers("pattern-written") if d.get("ok") == "1"}
    expect(written == {"vda", "vdb"}, f"guest wrote patterns to {written}", run)
    for path in images:
        head = Path(path).read_bytes()[:64]
        expect(head.startswith(b"MVMM-PATTERN-vd") and b"-sigterm\n" in head,
               f"{path} starts with {head[:32]!r}: mvmm did not flush the guest's write at shutdown", run)


def test_guest_sees_many_disks_and_data_reaches_the_images():
    with tempfile.TemporaryDirectory() as tmp:
        pattern_images = [f"{tmp}/pattern{i}.img" for i in range(3)]  # the third with cache=none (O_DIRECT)
        readonly_image, writable_image = f"{tmp}/readonly.img", f"{tmp}/writable.img"
        for path in pattern_images + [readonly_image, writable_image]:
            with open(path, "wb") as f:
                f.truncate(4 * MiB)
        Path(readonly_image).write_bytes(b"ORIGINAL" + bytes(4 * MiB - 8))

        one = disks_run(1, lambda i: 8 * MiB)
        eight = disks_run(8, lambda i: (i + 1) * MiB)
        many = disks_run(64, lambda i: MiB + i * 64 * 1024)
        ports32 = disks_run(32, lambda i: 2 * MiB)
        on_root_bus = disks_run(4, lambda i: 3 * MiB, bus="root")
        pattern = Run(guest_args("mvmm.script=write-pattern mvmm.pattern=t1",
                                 extra=[a for i, p in enumerate(pattern_images)
                                        for a in ("--disk", f"path={p}" + (",cache=none" if i == 2 else ""))]),
                      disk_images=pattern_images)
        readonly = Run(guest_args("mvmm.script=readonly-check",
                                  extra=["--disk", f"path={readonly_image},readonly=on",
                                         "--disk", f"path={writable_image}"]),
                       disk_images=[readonly_image, writable_image])
        guest.run_all([one, eight, many, ports32, on_root_bus, pattern, readonly], timeout=900)

        check_disks(one, [8 * MiB])
        check_disks(eight, [(i + 1) * MiB for i in range(8)])
        check_disks(many, [MiB + i * 64 * 1024 for i in range(64)])
        check_disks(ports32, [2 * MiB] * 32)
        check_disks(on_root_bus, [3 * MiB] * 4)

        expect(pattern.code == 0, f"pattern run exited {pattern.code}", pattern)
        written = {d["disk"] for _, d in pattern.markers("pattern-written") if d.get("ok") == "1"}
        expect(written == {"vda", "vdb", "vdc"}, f"guest wrote patterns to {written}", pattern)
        found = set()
        for path in pattern_images:
            head = Path(path).read_bytes()[:64]
            expect(head.startswith(b"MVMM-PATTERN-vd") and b"-t1\n" in head,
                   f"{path} starts with {head[:32]!r}, not the guest's pattern", pattern)
            found.add(head.split(b"\n")[0])
        expect(len(found) == 3, f"two images hold the same pattern: {found}", pattern)

        expect(readonly.code == 0, f"read-only run exited {readonly.code}", readonly)
        ro = {d["name"]: d["ro"] for _, d in readonly.markers("disk")}
        expect(sorted(ro.values()) == ["0", "1"], f"guest's read-only flags {ro}", readonly)
        results = {d["disk"]: d for _, d in readonly.markers("write-result")}
        expect(all((r["ro"] == "1") == (r["ok"] == "0") for r in results.values()),
               f"writes to the read-only disk succeeded or to the writable one failed: {results}", readonly)
        expect(Path(readonly_image).read_bytes()[:8] == b"ORIGINAL", "the read-only image changed", readonly)


def test_sigterm_flushes_the_guests_unflushed_writes():
    with tempfile.TemporaryDirectory() as tmp:
        images = [f"{tmp}/stopped{i}.img" for i in range(2)]
        for path in images:
            with open(path, "wb") as f:
                f.truncate(4 * MiB)
        disks = [a for p in images for a in ("--disk", f"path={p}")]
        stopped = Run(guest_args("mvmm.script=unsynced-write mvmm.pattern=sigterm mvmm.sleep=300",
                                 extra=["--api-socket", SOCKET, *disks]),
                      disk_images=images, companion=SIGTERM_CLIENT, flushed_only=True)
        guest.run_all([stopped], timeout=900)
        check_sigterm_shutdown(stopped, images)


if __name__ == "__main__":
    guest.main([test_guest_sees_many_disks_and_data_reaches_the_images,
                test_sigterm_flushes_the_guests_unflushed_writes])
