"""boot-bench's I/O comparison of aio= modes: --aios parsed and checked, the variants it makes (QEMU with its
default and with io_uring), the aio= key in both VMMs' disk options, the extra pairs of ratios, and the host-side
limit: bb_host_io run here with a stand-in mvmm-io, its lines collected, and the summary's fractions of it."""

import os
import stat
import subprocess
import tempfile
import unittest
from pathlib import Path

from mvmmtools.bench import boot_bench, results, runner, tables
from mvmmtools.bench.boot_bench_options import parse_args
from mvmmtools.bench.guest_config import Guest, Machine
from mvmmtools.bench.runs import Collector, Run
from mvmmtools.bench.tests.test_qcow2_options import refused, words_after

RUNNER = Path(runner.__file__).resolve().parent / "boot_bench_runner.sh"


class Aios(unittest.TestCase):
    GUEST = Guest("/k", "/i")
    MACHINE = Machine(disks=2, cpus=2, queues=2)

    def variants(self, *extra):
        args = parse_args(["--io", "--request-allocs", "pool", "--trim-policies", "off", *extra])
        return {v.name: v for v in boot_bench.variants(args)}

    def test_one_mvmm_variant_per_mode_and_qemu_with_io_uring_beside_its_default(self):
        found = self.variants("--aios", "io_uring,threads,sync")
        self.assertEqual(list(found), ["mvmm-pool-io_uring-off", "mvmm-pool-threads-off", "mvmm-pool-sync-off",
                                       "qemu", "qemu-io_uring"])
        self.assertEqual((found["qemu"].aio, found["qemu-io_uring"].aio), (None, "io_uring"))
        self.assertNotIn("qemu-io_uring", self.variants("--aios", "threads"))
        self.assertEqual(list(self.variants()), ["mvmm-pool-off", "qemu"])

    def test_the_mode_reaches_every_disk_of_both_vmms(self):
        found = self.variants("--aios", "io_uring,sync")
        mvmm = boot_bench.vmm_words(self.GUEST, self.MACHINE, found["mvmm-pool-sync-off"])
        self.assertEqual([d.split(",")[1] for d in words_after(mvmm, "--disk")], ["aio=sync"] * 2)
        qemu = boot_bench.vmm_words(self.GUEST, self.MACHINE, found["qemu-io_uring"])
        self.assertTrue(all(",aio=io_uring," in d for d in words_after(qemu, "-drive")))
        default = boot_bench.vmm_words(self.GUEST, self.MACHINE, found["qemu"])
        self.assertFalse(any("aio=" in d for d in words_after(default, "-drive")))

    def test_refused(self):
        self.assertIn("io_uring,threads,sync", refused(["--io", "--aios", "native"]))
        self.assertIn("virtio-blk", refused(["--scsi", "4", "--aios", "io_uring"]))

    def test_io_uring_variants_are_also_paired_with_qemus_io_uring(self):
        pairs = results.ratio_pairs(["mvmm-io_uring-off", "mvmm-sync-off", "qemu", "qemu-io_uring"])
        self.assertEqual(pairs, [("mvmm-io_uring-off", "qemu"), ("mvmm-sync-off", "qemu"),
                                 ("mvmm-io_uring-off", "qemu-io_uring")])
        self.assertEqual(results.names([{"v": "qemu"}, {"v": "qemu-io_uring"}, {"v": "mvmm"}], "v"),
                         ["mvmm", "qemu", "qemu-io_uring"])


class HostSideLimit(unittest.TestCase):
    def test_the_script_reads_the_first_disk_only_with_filled_disks(self):
        script = runner.host_script("boot-bench", 1, [], filled=(256, "/bin/mvmm-io"), host_io_seconds=5)
        self.assertIn("\nbb_host_io /bin/mvmm-io 5\n", script)
        self.assertNotIn("\nbb_host_io ", runner.host_script("boot-bench", 1, [], host_io_seconds=5))
        self.assertNotIn("\nbb_host_io ", runner.host_script("boot-bench", 0, [], filled=(256, "/x"),
                                                              host_io_seconds=5))

    def test_bb_host_io_runs_both_workloads_through_the_page_cache(self):
        with tempfile.TemporaryDirectory() as tmp:
            filler = Path(tmp, "mvmm-io")
            filler.write_text('#!/bin/sh\necho "args=$*" >>"$(dirname "$0")/calls"\n'
                              'echo "workload=$3 iops=100 mib_s=2.5"\n')
            filler.chmod(filler.stat().st_mode | stat.S_IXUSR)
            script = f'. "{RUNNER}"; BB_DIR={tmp}; bb_host_io "{filler}" 3'
            out = subprocess.run(["sh", "-c", script], text=True, capture_output=True, check=True).stdout
            calls = Path(tmp, "calls").read_text().splitlines()
        self.assertEqual(calls, [f"args=read {tmp}/disk0.img randread 4096 32 3 buffered",
                                 f"args=read {tmp}/disk0.img seqread 65536 32 3 buffered"])
        collector = Collector([Run("t", "r", 1, "mvmm")])
        for line in out.splitlines():
            collector.line(line)
        self.assertEqual([h["workload"] for h in collector.host_io], ["randread", "seqread"])

    def test_the_summary_gives_each_variants_rate_as_a_fraction_of_the_limit(self):
        host_io = [{"workload": "randread", "iops": 1000}, {"workload": "seqread", "mib_s": 200.0},
                   {"workload": "randread", "iops": 3000}]
        stat_of = lambda v: {"median": v, "min": v, "max": v}
        summary = {"1 disk": {"mvmm": {"metrics": {"randread_iops": stat_of(1600), "seqread_mib_s": stat_of(100)}},
                              "qemu": {"metrics": {}}}}
        text = "\n".join(tables.host_limit_lines(host_io, summary))
        self.assertIn("4K random read IOPS 2000", text)
        self.assertRegex(text, r"mvmm\s+0\.80\s+0\.50")
        self.assertRegex(text, r"qemu\s+-\s+-")
        self.assertEqual(tables.host_limit_lines([], summary), [])


if __name__ == "__main__":
    unittest.main()
