#!/usr/bin/env python3
"""tools/boot-bench --io on real boots, short: one round of mvmm (pool, drain) and QEMU, each workload 2 s in the
guest. Both VMMs' guests read every byte back as filled and report sane rates, and sane device requests and
interrupts per read; the memory at the end of the workload and mvmm's trims are in the records; the mvmm/QEMU
ratios and the summary are written."""

import json
import tempfile
from pathlib import Path

import guest
from guest import expect
from bench_test import bench

RATE_BOUND = 5e6  # IOPS no virtio-blk guest reaches here; a higher figure is a timing bug


def check_io(r):
    expect(not r["problems"], f"{r['tag']}: {r['problems']}")
    for workload, block in (("randread", 4096), ("seqread", 65536)):
        iops, mib_s = r[f"{workload}_iops"], r[f"{workload}_mib_s"]
        expect(0 < iops < RATE_BOUND, f"{r['tag']}: {workload} {iops} IOPS")
        expect(abs(mib_s - iops * block / (1 << 20)) <= 0.02 * mib_s + 0.1, f"{r['tag']}: {workload} {mib_s} MiB/s")
        # Each read is a device request or merged into one; completions raise interrupts, never many per read.
        requests, irqs = r[f"{workload}_dev_ios_per_io"], r[f"{workload}_irqs_per_io"]
        expect(requests is not None and 0 < requests <= 1.01, f"{r['tag']}: {workload} {requests} requests/read")
        expect(irqs is not None and 0 < irqs <= 2, f"{r['tag']}: {workload} {irqs} interrupts/read")
    expect(r["peak_rss_kib"] > r["guest_ram_rss_kib"] > 0 and r["heap_rss_kib"] > 0, f"{r['tag']}: memory")
    if r["vmm"] == "mvmm":
        expect(r["r_trims"] is not None and r["r_trim_ms"] is not None, f"{r['tag']}: no trim figures")


def test_io_bench_one_round():
    if guest.boot_mode()[0] is None:
        raise guest.SkipTest(guest.boot_mode()[1])
    out = Path(tempfile.mkdtemp(prefix="io-bench-test-"))
    p = bench("--io", "--mvmm", guest.mvmm_binary(), "--request-allocs", "pool", "--trim-policies", "drain",
              "--io-seconds", "2", "--io-disk-mib", "64", "--reps", "1", "--qemu-firmware", "qboot",
              "--plots", "none", "--out", str(out))
    expect(p.returncode == 0, f"boot-bench --io exited {p.returncode}:\n{p.stdout[-3000:]}")
    doc = json.loads((out / "boot-bench.json").read_text())
    expect([r["variant"] for r in doc["records"]] == ["mvmm-pool-drain", "qemu"],
           f"variants {[r['variant'] for r in doc['records']]}")
    for r in doc["records"]:
        check_io(r)
    ratios = {c["metric"] for c in doc["ratios"] if c["subject"] == "mvmm-pool-drain" and c["reference"] == "qemu"}
    expect({"randread_iops", "seqread_mib_s", "heap_rss_kib"} <= ratios, f"ratios {sorted(ratios)}")
    text = (out / "summary.txt").read_text()
    expect("I/O in the guest" in text and (out / "boots.csv").stat().st_size > 0, "summary or CSV missing")
    print(text)


if __name__ == "__main__":
    guest.main([test_io_bench_one_round])
