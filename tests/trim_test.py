#!/usr/bin/env python3
"""Real many-disk guest boots under each malloc-trim policy, checked through mvmm's exit stats (trim counters
behave as designed), and the management socket on a running guest: query-memory, trim-memory, quit."""

import json
import re
import tempfile

import guest
from guest import Run, expect, guest_args

DISKS = 24
MiB = 1 << 20


def exit_stats(run):
    m = re.search(r"exit stats: (.*)", run.output)
    expect(m, "mvmm printed no exit stats", run)
    return {k: (int(v) if v.isdigit() else v) for k, v in (kv.split("=", 1) for kv in m.group(1).split())}


def many_disks(cmdline, policy, companion=None):
    scratch = tempfile.mkdtemp(prefix="mvmm-trim-")
    images = {f"{scratch}/disk{i}.img": MiB for i in range(DISKS)}
    extra = ["--trim-policy", policy]
    for path in images:
        extra += ["--disk", f"path={path}"]
    if companion:
        extra += ["--api-socket", "/tmp/mvmm-trim-test.sock"]
    return Run(guest_args(cmdline, extra=extra), scratch_images=images, companion=companion)


# Waits for the guest to finish booting, then asks for memory, trims, asks again and quits.
SOCKET_CLIENT = """
ctl() { "$MVMM_CTL" --socket /tmp/mvmm-trim-test.sock --wait 120 "$@"; echo; }
for i in $(seq 600); do grep -q "MVMM-MARK idle" "$MVMM_LOG" && break; sleep 0.5; done
echo "BEFORE $(ctl query-memory)"
echo "TRIM $(ctl trim-memory)"
echo "AFTER $(ctl query-memory)"
echo "BAD $(echo 'not json' | "$MVMM_CTL" --socket /tmp/mvmm-trim-test.sock no-such-command)"
echo "QUIT $(ctl quit)"
"""


def reply(run, tag):
    m = re.search(rf"^{tag} (\{{.*\}})\s*$", run.companion_output, re.M)
    expect(m, f"no {tag} reply from the socket:\n{run.companion_output}", run)
    return json.loads(m.group(1))


def test_trim_policies_and_trim_memory_over_the_socket():
    runs = {p: many_disks("mvmm.script=markers", p) for p in ("off", "batch", "drain", "adaptive")}
    socket = many_disks("mvmm.script=idle mvmm.sleep=120", "off", companion=SOCKET_CLIENT)
    guest.run_all([*runs.values(), socket], timeout=900)

    stats = {}
    for policy, run in runs.items():
        expect(run.code == 0 and len(run.markers("disk")) == DISKS, f"{policy}: boot failed", run)
        stats[policy] = s = exit_stats(run)
        expect(s["trim_policy"] == policy, f"stats name policy {s['trim_policy']}", run)
        expect(s["rcu_batches"] >= 1, f"{policy}: the RCU call thread ran no batch", run)
    expect(stats["off"]["trims"] == 0, f"off trimmed {stats['off']['trims']} times", runs["off"])
    expect(stats["batch"]["trims"] == stats["batch"]["rcu_batches"],
           f"batch: {stats['batch']['trims']} trims for {stats['batch']['rcu_batches']} batches", runs["batch"])
    for policy in ("drain", "adaptive"):
        s = stats[policy]
        expect(1 <= s["trims"] <= s["rcu_batches"],
               f"{policy}: {s['trims']} trims for {s['rcu_batches']} batches", runs[policy])

    run = socket
    expect(run.code == 0, f"mvmm exited {run.code} after quit", run)
    before, trim, after = reply(run, "BEFORE"), reply(run, "TRIM"), reply(run, "AFTER")
    expect("return" in before and "return" in trim and "return" in after, "socket errors", run)
    print("socket:", json.dumps({"before": before["return"]["heap_rss_bytes"], "trim": trim["return"],
                                 "after": after["return"]["heap_rss_bytes"]}))
    t = trim["return"]
    # After a 24-disk boot mvmm's sbrk heap is under 1 MiB with its free space fragmented, so a
    # trim may have nothing whole to give back: it must run, be counted and never grow the heap.
    expect(t["heap_rss_after"] <= t["heap_rss_before"] and t["duration_ns"] > 0,
           f"trim-memory grew heap Rss or did not run: {t}", run)
    on_demand = after["return"]["trim"]["on_demand"]
    expect(on_demand["trims"] == before["return"]["trim"]["on_demand"]["trims"] + 1,
           f"the on-demand trim was not counted: {on_demand}", run)
    expect("error" in reply(run, "BAD"), "an unknown command got no JSON error", run)
    expect(reply(run, "QUIT") == {"return": {}}, "quit did not answer", run)


if __name__ == "__main__":
    guest.main([test_trim_policies_and_trim_memory_over_the_socket])
