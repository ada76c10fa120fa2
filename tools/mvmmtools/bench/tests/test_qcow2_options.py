"""boot-bench's qcow2 experiment: --disk-format, --l2-cache-size, --cluster-size and --cache-allocs parsed and
checked, the matrix and variants they make, the VMMs' arguments for qcow2 overlays and raw disks, and the test
host's bb_overlays (run here with the real qemu-img) making a filled base and empty overlays of it."""

import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from mvmmtools.bench import boot_bench, runner
from mvmmtools.bench.boot_bench_options import parse_args
from mvmmtools.bench.guest_config import Guest, Machine, Variant, mvmm_args, qemu_args

def refused(argv):
    """parse_args' error message for argv (None when it parses)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parse_args(argv)
        except SystemExit:
            return err.getvalue()
    return None


def words_after(words, option):
    return [words[i + 1] for i, w in enumerate(words) if w == option]


class Options(unittest.TestCase):
    def test_qcow2_options_parse(self):
        args = parse_args(["--io", "--disks", "64", "--disk-format", "qcow2", "--l2-cache-size", "4M",
                           "--cache-allocs", "heap,mapping", "--cluster-size", "4K"])
        self.assertEqual((args.disk_format, args.l2_cache_size, args.cache_allocs, args.cluster_size),
                         (["qcow2"], "4M", ["heap", "mapping"], 4096))

    def test_defaults_are_raw_and_mvmms_own_modes(self):
        args = parse_args([])
        self.assertEqual((args.disk_format, args.l2_cache_size, args.cache_allocs), (["raw"], None, [None]))

    def test_qcow2_only_options_need_qcow2(self):
        for extra in (["--l2-cache-size", "4M"], ["--cache-allocs", "heap"], ["--cluster-size", "4K"]):
            self.assertIn("need --disk-format qcow2", refused(["--disks", "1"] + extra) or "", extra)

    def test_bad_values_are_refused(self):
        qcow2 = ["--disks", "1", "--disk-format", "qcow2"]
        self.assertIn("needs --disks 1 or more", refused(["--disk-format", "qcow2"]))
        for extra in (["--cluster-size", "3000"], ["--cluster-size", "4M"], ["--cluster-size", "256"],
                      ["--l2-cache-size", "4Q"], ["--l2-cache-size", "0"]):
            self.assertIn("--cluster-size takes a power of two", refused(qcow2 + extra) or "", extra)
        self.assertIn("distinct values from mapping,heap", refused(qcow2 + ["--cache-allocs", "slab"]))
        self.assertIn("distinct values from raw,qcow2", refused(["--disk-format", "vmdk"]))


class MatrixAndVariants(unittest.TestCase):
    def test_each_format_is_a_configuration_with_the_cache_size_on_qcow2_only(self):
        args = parse_args(["--disks", "2", "--disk-format", "raw,qcow2", "--l2-cache-size", "4M"])
        machines = boot_bench.matrix(args)
        self.assertEqual([(m.format, m.l2_cache_size) for m in machines], [("raw", None), ("qcow2", "4M")])
        self.assertEqual([m.label(["format"]) for m in machines], ["raw", "qcow2"])

    def test_cache_allocs_times_policies_for_mvmm_and_qemu_once(self):
        args = parse_args(["--io", "--disk-format", "qcow2", "--cache-allocs", "heap,mapping",
                           "--trim-policies", "off,batch", "--request-allocs", "pool", "--mvmm", sys.executable])
        found = [(v.name, v.cache_alloc, v.policy) for v in boot_bench.variants(args)]
        self.assertEqual(found, [("mvmm-pool-heap-off", "heap", "off"), ("mvmm-pool-heap-batch", "heap", "batch"),
                                 ("mvmm-pool-mapping-off", "mapping", "off"),
                                 ("mvmm-pool-mapping-batch", "mapping", "batch"), ("qemu", None, None)])


class Commands(unittest.TestCase):
    GUEST = Guest("/k", "/i", "c", ("/img",))
    QCOW2 = Machine(disks=2, format="qcow2", l2_cache_size="4M")

    def test_mvmm_opens_the_overlays_as_qcow2_with_the_cache_size(self):
        self.assertEqual(words_after(mvmm_args(self.GUEST, self.QCOW2), "--disk"),
                         ["path=/tmp/boot-bench/overlay0.qcow2,format=qcow2,l2-cache-size=4M",
                          "path=/tmp/boot-bench/overlay1.qcow2,format=qcow2,l2-cache-size=4M",
                          "path=/img,readonly=on"])

    def test_mvmm_raw_disks_name_no_format(self):
        self.assertEqual(words_after(mvmm_args(self.GUEST, Machine(disks=1, bus="root")), "--disk")[0],
                         "path=/tmp/boot-bench/disk0.img,bus=root")

    def test_qemu_drives_say_their_format(self):
        drives = words_after(qemu_args(self.GUEST, self.QCOW2), "-drive")
        self.assertEqual(drives, ["file=/tmp/boot-bench/overlay0.qcow2,format=qcow2,l2-cache-size=4M,if=none,id=d0",
                                  "file=/tmp/boot-bench/overlay1.qcow2,format=qcow2,l2-cache-size=4M,if=none,id=d1",
                                  "file=/img,format=raw,readonly=on,if=none,id=d2"])
        raw = words_after(qemu_args(self.GUEST, Machine(disks=1)), "-drive")[0]
        self.assertEqual(raw, "file=/tmp/boot-bench/disk0.img,format=raw,if=none,id=d0")
        scsi = words_after(qemu_args(self.GUEST, Machine(disks=1, kind="scsi", format="qcow2")), "-drive")[0]
        self.assertEqual(scsi, "file=/tmp/boot-bench/overlay0.qcow2,format=qcow2,if=none,id=d0")

    def test_the_variants_cache_mode_goes_to_mvmm_only(self):
        heap = Variant("mvmm-heap-off", "mvmm", policy="off", cache_alloc="heap")
        words = boot_bench.vmm_words(self.GUEST, self.QCOW2, heap, report="/r.json")
        self.assertEqual(words[-6:], ["--trim-policy", "off", "--cache-alloc", "heap", "--report", "/r.json"])
        self.assertNotIn("--cache-alloc", boot_bench.vmm_words(self.GUEST, self.QCOW2, Variant("qemu", "qemu")))

    def test_the_test_host_script_makes_the_overlays(self):
        script = runner.host_script("boot-bench", 0, [], overlays=(64, 256, "/bin/mvmm-io", 65536))
        self.assertIn("bb_disks 0 64 || exit 1\nbb_overlays 64 256 /bin/mvmm-io 65536 || exit 1\n", script)
        self.assertNotIn("\nbb_overlays ", runner.host_script("boot-bench", 1, []))


@unittest.skipUnless(shutil.which("qemu-img"), "qemu-img is not installed (qemu-utils)")
class Overlays(unittest.TestCase):
    """bb_overlays in sh with the real qemu-img and a filler that writes random bytes."""

    def setUp(self):
        self.dir = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, self.dir)
        self.filler = self.dir / "filler"
        self.filler.write_text('#!/bin/sh\n[ "$1" = fill ] && head -c $(($3 * 1048576)) /dev/urandom >"$2"\n')
        self.filler.chmod(0o755)

    def overlays(self, count):
        script = f'. {runner.RUNNER}\nBB_DIR={self.dir}\nbb_overlays {count} 2 {self.filler} 4096\n'
        return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=120)

    def info(self, name):
        p = subprocess.run(["qemu-img", "info", "--output=json", str(self.dir / name)], capture_output=True,
                           text=True, check=True)
        return json.loads(p.stdout)

    def test_a_filled_base_and_empty_overlays_of_it(self):
        p = self.overlays(3)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        base = self.info("base.qcow2")
        self.assertEqual((base["format"], base["cluster-size"], base["virtual-size"]), ("qcow2", 4096, 2 << 20))
        self.assertGreaterEqual(base["actual-size"], 2 << 20)  # every cluster written
        self.assertFalse((self.dir / "base.raw").exists())
        for i in range(3):
            overlay = self.info(f"overlay{i}.qcow2")
            self.assertEqual((overlay["backing-filename"], overlay["backing-filename-format"]),
                             (str(self.dir / "base.qcow2"), "qcow2"))
        self.assertFalse((self.dir / "overlay3.qcow2").exists())

    def test_a_failed_filler_is_an_error_line(self):
        self.filler.write_text("#!/bin/sh\nexit 1\n")
        p = self.overlays(1)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(f"BOOTBENCH-ERROR cannot make {self.dir}/base.qcow2", p.stdout)


if __name__ == "__main__":
    unittest.main()
