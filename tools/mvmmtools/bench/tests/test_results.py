"""mvmmtools.bench: the runner's lines into runs (Collector), runs into per-boot records (mvmm's --report parsed),
the summary, the paired ratios and the CSV. The transcript is real: round 1 of a 1-disk A/B run with QEMU."""

import csv
import io
import re
import tempfile
import unittest
from argparse import Namespace
from pathlib import Path

from mvmmtools.bench import boot_bench, results, tables
from mvmmtools.bench.guest_config import Variant
from mvmmtools.bench.runs import Collector, Run

HERE = Path(__file__).resolve().parent

TAGS = {"r1.c0.mvmm-a": Variant("mvmm-a", "mvmm", "a"), "r1.c0.mvmm-b": Variant("mvmm-b", "mvmm", "b"),
        "r1.c0.qemu": Variant("qemu", "qemu")}


def collected(text):
    runs = [Run(tag, "r", 1, v.name) for tag, v in TAGS.items()]
    collector = Collector(runs)
    for line in text.splitlines():
        collector.line(line)
    return collector.ordered()


def records(text, io=False):
    return [results.record(run, "1 disk", TAGS[run.tag], 1, io=io) for run in collected(text)]


TRANSCRIPT = (HERE / "data" / "runner-transcript.txt").read_text()


class Parsing(unittest.TestCase):
    def setUp(self):
        self.mvmm, self.b, self.qemu = records(TRANSCRIPT)

    def test_times_and_phases_add_up(self):
        r = self.mvmm
        self.assertEqual(r["problems"], [])
        self.assertLess(r["first_kvm_run_s"], r["init_s"])
        self.assertLess(r["init_s"], r["all_disks_s"])
        self.assertLess(r["all_disks_s"], r["exit_s"])
        self.assertAlmostEqual(r["setup_s"] + r["kernel_s"] + r["disks_s"] + r["shutdown_s"], r["total_s"], 2)

    def test_memory_from_proc_for_both_vmms(self):
        for r in (self.mvmm, self.qemu):
            self.assertGreater(r["peak_rss_kib"], r["guest_ram_rss_kib"] > 0)
            self.assertGreater(r["heap_rss_kib"], 0)
        self.assertGreater(self.qemu["heap_rss_kib"], self.mvmm["heap_rss_kib"])

    def test_mvmm_report_figures(self):
        r = self.mvmm
        self.assertEqual(r["r_exit_code"], 0)
        self.assertGreater(r["r_heap_after_disks_kib"], 0)
        self.assertGreater(r["r_vm_exits"], r["r_exits_mmio"] > 0)
        self.assertGreater(r["r_as_rebuilds"], 0)
        # The report's set-up steps follow its timeline, in order, and end at its first KVM_RUN.
        steps = sum(r[k] for k, _ in results.SETUP)
        self.assertAlmostEqual(steps, r["r_first_kvm_run_ms"] / 1000, 3)
        self.assertTrue(all(r[k] >= 0 for k, _ in results.SETUP))
        self.assertNotIn("r_exit_code", self.qemu)

    def test_malloc_at_the_end_of_the_workload(self):
        at = {"io-done": {"malloc_bytes": 20 << 20, "malloc_in_use_bytes": 12 << 20}, "poweroff": {"malloc_bytes": 1}}
        found = results.report_figures({"memory": {"heap_at_marks": at}})
        self.assertEqual((found["r_malloc_io_done_kib"], found["r_malloc_in_use_io_done_kib"]), (20480, 12288))
        self.assertIsNone(results.report_figures({"memory": {}})["r_malloc_in_use_io_done_kib"])

    def test_the_per_device_timeline_gives_the_last_driver_ok(self):
        doc = {"timeline": {"first_kvm_run": 2_000_000, "devices": [
            {"name": "disk 0", "driver_ok": 5_000_000, "first_notify": 6_000_000},
            {"name": "disk 1", "driver_ok": 7_500_000, "first_notify": None},
            {"name": "scsi c0", "driver_ok": None, "first_notify": None}]}}
        found = results.report_figures(doc)
        self.assertEqual(found["r_first_kvm_run_ms"], 2.0)
        self.assertEqual(found["r_last_driver_ok_ms"], 7.5)
        self.assertNotIn("r_devices_ms", found)

    def test_a_crashed_guest_keeps_its_report(self):
        text = TRANSCRIPT.replace("BOOTBENCH-END r1.c0.mvmm-a 115.7 0 0", "BOOTBENCH-END r1.c0.mvmm-a 115.7 4 0")
        crashed = records(text)[0]
        self.assertIn("exit code 4", crashed["problems"])
        self.assertGreater(crashed["r_vm_exits"], 0)

    def test_an_unreadable_report_is_said(self):
        text = "\n".join(line[:200] if line.startswith("BOOTBENCH-REPORT r1.c0.mvmm-a") else line
                         for line in TRANSCRIPT.splitlines())
        run = collected(text)[0]
        self.assertIsNone(run.report)
        self.assertIn("unreadable --report", run.tail[0])

    def test_rederived_from_the_stored_run(self):
        stored = dict(self.mvmm, run=dict(self.mvmm["run"], lines=[list(x) for x in self.mvmm["run"]["lines"]]))
        self.assertEqual(results.rederived(stored), self.mvmm)


class Summary(unittest.TestCase):
    def setUp(self):
        self.records = records(TRANSCRIPT)

    def test_medians_per_variant(self):
        summary = results.summarize(self.records)
        self.assertEqual(list(summary["1 disk"]), ["mvmm-a", "mvmm-b", "qemu"])
        exit_ = summary["1 disk"]["qemu"]["metrics"]["exit_s"]
        self.assertEqual(exit_["n"], 1)
        self.assertEqual(exit_["median"], self.records[2]["exit_s"])

    def test_ratio_pairs(self):
        self.assertEqual(results.ratio_pairs(["mvmm-a", "mvmm-b-off", "mvmm-a-off", "mvmm-b", "qemu"]),
                         [("mvmm-a", "qemu"), ("mvmm-b-off", "qemu"), ("mvmm-a-off", "qemu"), ("mvmm-b", "qemu"),
                          ("mvmm-b-off", "mvmm-a-off"), ("mvmm-b", "mvmm-a")])

    def test_paired_ratios_of_one_round(self):
        found = {(c["subject"], c["reference"], c["metric"]): c for c in results.ratios(self.records)}
        c = found[("mvmm-a", "qemu", "exit_s")]
        self.assertAlmostEqual(c["point"], self.records[0]["exit_s"] / self.records[2]["exit_s"], 3)
        self.assertIn(("mvmm-b", "mvmm-a", "r_start_s"), found)
        self.assertNotIn(("mvmm-a", "qemu", "r_start_s"), found)  # QEMU has no report

    def test_csv_has_a_row_per_boot_and_no_nested_documents(self):
        rows = list(csv.DictReader(io.StringIO(results.csv_text(self.records))))
        self.assertEqual([r["variant"] for r in rows], ["mvmm-a", "mvmm-b", "qemu"])
        self.assertNotIn("run", rows[0])
        self.assertEqual(float(rows[0]["exit_s"]), self.records[0]["exit_s"])


def io_line(tag, workload, iops, block, mismatches=0, counters=""):
    return (f"BOOTBENCH-LINE {tag} 110.0 MVMM-MARK io 5.1 workload={workload} block_bytes={block} depth=32 "
            f"ios={iops * 5} seconds=5.001 iops={iops} mib_s={iops * block / (1 << 20):.1f} mismatches={mismatches} "
            f"errors=0{counters}")


# The guest kernel's counts during mvmm-a's workloads (io-bench since issue 26): randread 50000 reads, seqread 5000.
COUNTERS = {"randread": " dev_ios=50000 dev_merges=0 irqs=41000", "seqread": " dev_ios=4000 dev_merges=1000 irqs=500"}
# mvmm-a and QEMU ran both workloads (QEMU 20% faster) and got to io-done, mvmm-b's guest printed none; QEMU's
# marks are as io-bench printed them before issue 26 (no counters); the memory lines have the thread arenas that
# today's runner reads too (mvmm's I/O threads and QEMU's).
ARENAS = {"r1.c0.mvmm-a": 2048, "r1.c0.mvmm-b": 2048, "r1.c0.qemu": 8192}
IO_TRANSCRIPT = "\n".join([re.sub(r"(BOOTBENCH-MEM (\S+) .*)",
                                  lambda m: f"{m[1]} arena_rss_kib={ARENAS[m[2]]} arena_size_kib=4096 arenas=2",
                                  TRANSCRIPT)] +
                          [io_line(tag, workload, iops, block, counters=COUNTERS[workload] if tag.endswith("a") else "")
                           for tag, scale in (("r1.c0.mvmm-a", 1.0), ("r1.c0.qemu", 1.2))
                           for workload, iops, block in (("randread", int(10000 * scale), 4096),
                                                         ("seqread", int(1000 * scale), 65536))] +
                          [f"BOOTBENCH-LINE {tag} {t} MVMM-MARK io-done 60.0"
                           for tag, t in (("r1.c0.mvmm-a", 111.0), ("r1.c0.qemu", 290.0))] +
                          # QEMU's threads at its io-start and io markers: an io_uring worker starts in randread,
                          # a pool thread (14) runs 20 ticks in seqread and ends.
                          ["BOOTBENCH-CPU r1.c0.qemu 280.0 io-start ticks=2100 10:qemu-system-x86:100 "
                           "11:CPU_0/KVM:1000 12:CPU_1/KVM:1000",
                           "BOOTBENCH-CPU r1.c0.qemu 285.0 io ticks=2760 10:qemu-system-x86:160 11:CPU_0/KVM:1300 "
                           "12:CPU_1/KVM:1240 13:iou-wrk-10:60",
                           "BOOTBENCH-CPU r1.c0.qemu 290.0 io ticks=2985 10:qemu-system-x86:175 11:CPU_0/KVM:1400 "
                           "12:CPU_1/KVM:1300 13:iou-wrk-10:90"])


class Qcow2Caches(unittest.TestCase):
    REPORT = {"disk_caches": {"resident_bytes": 3 << 20, "allocated_bytes": 5 << 20, "images": [
        {"path": "/tmp/boot-bench/overlay0.qcow2", "l2": {"misses": 7}, "refcount": {"misses": 1}},
        {"path": "/tmp/boot-bench/base.qcow2", "l2": {"misses": 40}, "refcount": {"misses": 0}}]}}

    def test_totals_from_the_report(self):
        f = results.report_figures(self.REPORT)
        self.assertEqual((f["r_cache_resident_kib"], f["r_cache_allocated_kib"], f["r_l2_misses"]),
                         (3072, 5120, 47))

    def test_a_report_without_disk_caches_has_none(self):
        f = results.report_figures({"exit": {"code": 0}})
        self.assertEqual((f["r_cache_resident_kib"], f["r_cache_allocated_kib"], f["r_l2_misses"]), (None,) * 3)

    def test_the_cache_mode_survives_rederiving(self):
        run = collected(TRANSCRIPT)[0]
        stored = results.record(run, "1 disk", Variant("mvmm-heap-off", "mvmm", None, "off", None, "heap"), 1)
        again = results.rederived(stored)
        self.assertEqual((again["cache_alloc"], again["policy"]), ("heap", "off"))


class IoWorkloads(unittest.TestCase):
    def setUp(self):
        self.records = records(IO_TRANSCRIPT, io=True)

    def test_rates_from_the_guest(self):
        a, _, qemu = self.records
        self.assertEqual((a["randread_iops"], a["randread_mib_s"]), (10000, 39.1))
        self.assertEqual((qemu["seqread_iops"], qemu["seqread_mib_s"]), (1200, 75.0))
        self.assertEqual(a["problems"], [])

    def test_requests_and_interrupts_per_read(self):
        a = self.records[0]
        self.assertEqual([a[k] for k, _ in results.IO_PER_READ], [1.0, 0.0, 0.82, 0.8, 0.2, 0.1])
        self.assertEqual(results.summarize(self.records)["1 disk"]["mvmm-a"]["metrics"]["seqread_irqs_per_io"],
                         {"median": 0.1, "min": 0.1, "max": 0.1, "n": 1})

    def test_marks_without_counters_have_none_per_read(self):
        qemu = self.records[2]
        self.assertEqual(qemu["problems"], [])
        self.assertEqual([qemu[k] for k, _ in results.IO_PER_READ], [None] * 6)
        self.assertNotIn("randread_irqs_per_io", results.summarize(self.records)["1 disk"]["qemu"]["metrics"])

    def test_host_cpu_per_read_by_thread_class(self):
        a, _, qemu = self.records
        # randread: 60,000 reads, 660 ticks (vCPUs 540, io_uring's worker 60, the main loop 60); seqread: 6,000
        # reads, 225 ticks (160, 30, 15 and 20 in the pool thread that ended); a tick is 10 ms.
        self.assertEqual([qemu[k] for k, _ in results.IO_CPU],
                         [110.0, 90.0, 10.0, 10.0, 0.0, 375.0, 266.7, 50.0, 25.0, 33.3])
        self.assertEqual([a[k] for k, _ in results.IO_CPU], [None] * 10, "no snapshots, no figures")
        self.assertIn("4K rand CPU us/read",
                      "\n".join(tables.io_tables("1 disk", results.summarize(self.records)["1 disk"], 1)))

    def test_workload_time_from_init_to_io_done(self):
        a, b, qemu = self.records
        self.assertAlmostEqual(a["workload_s"], 111.0 - 92.98, 3)
        self.assertAlmostEqual(qemu["workload_s"], 290.0 - 283.74, 3)
        self.assertIsNone(b["workload_s"])

    def test_a_missing_or_mismatching_workload_is_a_problem(self):
        self.assertEqual(self.records[1]["problems"], ["no randread result", "no seqread result"])
        bad = records(IO_TRANSCRIPT + "\n" + io_line("r1.c0.mvmm-a", "seqread", 1000, 65536, mismatches=3), io=True)
        self.assertIn("seqread: iops=1000 errors=0 mismatches=3", bad[0]["problems"])
        self.assertEqual(records(TRANSCRIPT)[1]["problems"], [])  # a boot without --io needs no I/O results

    def test_memory_read_without_guest_ram_is_a_problem(self):
        late = IO_TRANSCRIPT.replace("BOOTBENCH-MEM r1.c0.qemu hwm_kib=184548 guest_kib=129024",
                                     "BOOTBENCH-MEM r1.c0.qemu hwm_kib=184548 guest_kib=0")
        self.assertNotEqual(late, IO_TRANSCRIPT)
        self.assertIn("no guest RAM in the memory read at io-done (the VMM was gone or exiting)",
                      records(late, io=True)[2]["problems"])

    def test_ratios_of_rates_and_memory(self):
        found = {(c["subject"], c["metric"]): c for c in results.ratios(self.records) if c["reference"] == "qemu"}
        self.assertAlmostEqual(found[("mvmm-a", "randread_iops")]["point"], 10000 / 12000, 4)
        self.assertEqual({m for _, m in found}, set(results.IO_RATIO_METRICS))

    def test_qcow2_against_raw_in_the_same_round(self):
        # The same boots as overlays at 90% of the raw IOPS (boot-bench --disk-format raw,qcow2 labels the two
        # configurations by the format alone when nothing else varies).
        raw = [{**r, "config": "64 disks, raw"} for r in self.records]
        qcow2 = [{**r, "config": "64 disks, qcow2", "randread_iops": r["randread_iops"] and r["randread_iops"] * 0.9}
                 for r in self.records]
        found = {(c["subject"], c["reference"], c["metric"]): c for c in results.ratios(raw + qcow2)}
        for variant in ("mvmm-a", "qemu"):
            c = found[(f"{variant} qcow2", f"{variant} raw", "randread_iops")]
            self.assertEqual((c["config"], c["n"]), ("64 disks, qcow2", 1))
            self.assertAlmostEqual(c["point"], 0.9, 4)
        self.assertAlmostEqual(found[("mvmm-a qcow2", "mvmm-a raw", "seqread_iops")]["point"], 1.0, 4)
        self.assertFalse([k for k in found if k[0].startswith("mvmm-b")])  # mvmm-b did no I/O

    def test_report_has_a_row_per_variant(self):
        config = {"reps": 1, "warmup": 0, "where": "here", "load_average": "1", "mvmm": {}, "wall_s": 1,
                  "guest": {"kernel": "k", "cmdline": "c"}, "io": {"seconds": 5, "disk_mib": 256}}
        doc = {"config": config, "records": self.records, "summary": results.summarize(self.records),
               "ratios": results.ratios(self.records), "problems": []}
        text = tables.report(doc)
        self.assertIn("1 disk: boot and I/O in the guest", text)
        rows = [line.split() for line in text.splitlines() if line.startswith("mvmm-a ")]
        self.assertEqual(rows[0][1:7], ["62.17", "10000", "39.1", "1000", "62.5", "18.02"])
        self.assertEqual(rows[1][1:], ["1.000", "0.000", "0.820", "0.800", "0.200", "0.100"])  # per read
        self.assertEqual(rows[2][1:], ["-"] * 10)  # host CPU per read: mvmm-a's run took no snapshots
        self.assertEqual(rows[3][4:8], ["0.2", "0.3", "2.0", "2.2"])  # heap Rss and size, arenas, malloc Rss
        self.assertEqual(rows[3][8:10], ["-", "-"])  # this mvmm build's report read no malloc at io-done
        self.assertEqual(rows[3][12:], ["-", "-"])  # and no qcow2 caches
        self.assertIn("mvmm-b [0/1 ok]", text)
        qemu = [line.split() for line in text.splitlines() if line.startswith("qemu ")]
        self.assertEqual(qemu[1][1:], ["-"] * 6)  # its marks had no counters


if __name__ == "__main__":
    unittest.main()


class Profiles(unittest.TestCase):
    """boot-bench --perf: the runner's BOOTBENCH-PERF lines are kept with their run and written to --out as
    profile-TAG.txt, one file per run that has a profile."""

    def test_kept_per_run_and_written_per_tag(self):
        perf = ["BOOTBENCH-PERF r1.c0.qemu     46.51%  CPU 0/KVM",
                "BOOTBENCH-PERF r1.c0.qemu     21.55%  qemu-system-x86  [kernel.kallsyms]  [k] copy_user_enhanced"]
        recs = records(TRANSCRIPT + "\n" + "\n".join(perf) + "\n")
        self.assertEqual(recs[2]["run"]["profile"], ["    46.51%  CPU 0/KVM", perf[1].split(" ", 2)[2]])
        self.assertEqual(recs[0]["run"]["profile"], [])
        with tempfile.TemporaryDirectory() as tmp:
            args = Namespace(json=None, out=Path(tmp), plots="none")
            boot_bench.write_outputs({"records": recs}, args, "summary")
            self.assertEqual(sorted(p.name for p in Path(tmp).glob("profile-*")), ["profile-r1.c0.qemu.txt"])
            self.assertIn("CPU 0/KVM", Path(tmp, "profile-r1.c0.qemu.txt").read_text())
