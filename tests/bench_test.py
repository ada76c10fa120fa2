#!/usr/bin/env python3
"""tools/boot-bench on real boots: a short matrix (2 configurations x 2 rounds, mvmm and QEMU) writes its outputs
with sane figures, and its gate, given those boots back, flags mvmm made 200 ms slower before its first KVM_RUN
and passes an unchanged copy."""

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import guest
from guest import REPO, expect

BENCH = REPO / "tools" / "boot-bench"


def bench(*args):
    p = subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=3000)
    print(p.stderr[-3000:], flush=True)
    return p


def check_record(r):
    expect(not r["problems"], f"{r['tag']}: {r['problems']}")
    times = [r[k] for k in ("first_kvm_run_s", "init_s", "all_disks_s", "exit_s") if r[k] is not None]
    expect(times == sorted(times) and times[0] > 0, f"{r['tag']}: phases out of order {times}")
    expect(r["peak_rss_kib"] > r["guest_ram_rss_kib"] > 0 and r["heap_rss_kib"] > 0, f"{r['tag']}: memory")
    if r["vmm"] == "mvmm":
        expect(r["first_kvm_run_s"] is not None, f"{r['tag']}: no first KVM_RUN")
        expect(r["r_exit_code"] == 0 and r["r_heap_exit_kib"] > 0 and r["r_vm_exits"] > 0,
               f"{r['tag']}: report figures {r.get('r_exit_code')}")
        expect(r["run"]["report"]["marks"][0]["name"] == "init", f"{r['tag']}: report marks")


def test_short_matrix_and_the_gate_on_its_boots():
    if guest.boot_mode()[0] is None:
        raise guest.SkipTest(guest.boot_mode()[1])
    out = Path(tempfile.mkdtemp(prefix="boot-bench-test-"))
    p = bench("--mvmm", guest.mvmm_binary(), "--disks", "0,1", "--reps", "2", "--qemu-firmware", "qboot",
              "--out", str(out))
    expect(p.returncode == 0, f"boot-bench exited {p.returncode}:\n{p.stdout[-3000:]}")
    for name in ("boot-bench.json", "boots.csv", "summary.txt"):
        expect((out / name).stat().st_size > 0, f"{name} missing")
    doc = json.loads((out / "boot-bench.json").read_text())
    expect(len(doc["records"]) == 8, f"{len(doc['records'])} boots, not 2 configurations x 2 VMMs x 2 rounds")
    for r in doc["records"]:
        check_record(r)
    expect(list(doc["summary"]) == ["0 disks", "1 disk"], f"configurations {list(doc['summary'])}")
    rows = list(csv.DictReader((out / "boots.csv").open()))
    expect(len(rows) == 8 and float(rows[0]["exit_s"]) > 0, "boots.csv")
    exits = [c for c in doc["ratios"] if c["metric"] == "exit_s" and c["reference"] == "qemu"]
    expect(len(exits) == 2 and all(0.1 < c["lo"] <= c["point"] <= c["hi"] < 10 for c in exits),
           f"mvmm/QEMU exit ratios {exits}")
    try:
        import matplotlib  # noqa: F401
        expect((out / "phases.png").stat().st_size > 0 and (out / "memory.png").exists(), "plots missing")
    except ImportError:
        print("no matplotlib here: plots not checked")
    check_gate(out, list(doc["summary"]))
    print((out / "summary.txt").read_text())


def noise(*args, into):
    """mvmmtools.bench.tests.noise's document rewrites (repeat, delay), written to `into`."""
    p = subprocess.run([sys.executable, "-m", "mvmmtools.bench.tests.noise", *args], capture_output=True, text=True)
    expect(p.returncode == 0, f"noise {' '.join(args)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    into.write_text(p.stdout)
    return str(into)


def check_gate(out, configs):
    """The gate through boot-bench's command line on this run's boots: each configuration's first round three
    times over is the baseline (rounds without noise, so the gate can decide: fewer than 3 rounds never do; its
    statistics in noise are tools/mvmmtools/bench/tests/test_gate.py's), against a copy whose mvmm slept 200 ms
    before its first KVM_RUN (exit 1: that step regressed, in every configuration, and nothing after it), and
    against an unchanged copy (exit 0)."""
    baseline = noise("repeat", str(out / "boot-bench.json"), "3", into=out / "baseline.json")
    slower = noise("delay", baseline, "mvmm", "0.2", into=out / "slower.json")
    gate = lambda doc: bench("--report", doc, "--baseline", baseline, "--threshold", "5%", "--plots", "none",
                             "--json", str(out / "gate.json"))
    p = gate(slower)
    expect(p.returncode == 1, f"the gate exited {p.returncode} on mvmm 200 ms slower:\n{p.stdout[-3000:]}")
    found = {(c["config"], c["metric"]) for c in json.loads((out / "gate.json").read_text())["gate"]["regressions"]}
    expect({(c, "r_start_s") for c in configs} <= found <= {(c, m) for c in configs
                                                            for m in ("r_start_s", "setup_s", "total_s")},
           f"the gate flagged {sorted(found)}, not the step before the first KVM_RUN in {configs}")
    expect(all(f"{c} mvmm guest loaded -> first KVM_RUN x" in p.stdout for c in configs),
           f"the gate did not name the step and configuration:\n{p.stdout[-3000:]}")
    p = gate(noise("delay", baseline, "mvmm", "0", into=out / "unchanged.json"))
    expect(p.returncode == 0 and "gate: pass" in p.stdout,
           f"the gate exited {p.returncode} on an unchanged copy:\n{p.stdout[-3000:]}")


if __name__ == "__main__":
    guest.main([test_short_matrix_and_the_gate_on_its_boots])
