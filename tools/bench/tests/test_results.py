"""tools/bench: the runner's lines into runs (Collector), runs into per-boot records (mvmm's --report parsed),
the summary, the paired ratios and the CSV. The transcript is real: round 1 of a 1-disk A/B run with QEMU."""

import csv
import io
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import results  # noqa: E402
from guest_config import Variant  # noqa: E402
from testhost import Collector, Run  # noqa: E402

TAGS = {"r1.c0.mvmm-a": Variant("mvmm-a", "mvmm", "a"), "r1.c0.mvmm-b": Variant("mvmm-b", "mvmm", "b"),
        "r1.c0.qemu": Variant("qemu", "qemu")}


def collected(text):
    runs = [Run(tag, "r", 1, v.name) for tag, v in TAGS.items()]
    collector = Collector(runs)
    for line in text.splitlines():
        collector.line(line)
    return collector.ordered()


def records(text):
    return [results.record(run, "1 disk", TAGS[run.tag], 1) for run in collected(text)]


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


if __name__ == "__main__":
    unittest.main()
