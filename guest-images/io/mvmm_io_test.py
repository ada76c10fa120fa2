"""Unit tests of mvmm-io (guest-images/io/mvmm_io.cc), natively on a file in /dev/shm (tmpfs takes O_DIRECT since
Linux 6.6): both workloads read every byte back as filled, their figures agree with each other, a changed word is
caught, bad arguments are refused. MVMM_IO names the binary (meson sets it)."""

import os
import re
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path

TOOL = os.environ.get("MVMM_IO", "mvmm-io")
MIB = 1 << 20


def run(*args):
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=60)


def figures(line):
    return {k: float(v) if re.fullmatch(r"[\d.]+", v) else v for k, v in re.findall(r"(\w+)=(\S+)", line)}


class MvmmIoTest(unittest.TestCase):
    def setUp(self):
        self.dir = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        self.disk = self.dir / "disk.img"
        self.assertEqual(run("fill", self.disk, 8).returncode, 0)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_fill_writes_the_pattern(self):
        data = self.disk.read_bytes()
        self.assertEqual(len(data), 8 * MIB)
        at = 5 * MIB + 24
        self.assertEqual(int.from_bytes(data[at:at + 8], "little"), 0x4d564d4d2d494f00 ^ at)

    def test_both_workloads_read_what_was_filled(self):
        for workload, block in (("randread", 4096), ("seqread", 65536)):
            p = run("read", self.disk, workload, block, 32, 1)
            self.assertEqual(p.returncode, 0, p.stderr)
            f = figures(p.stdout)
            self.assertEqual((f["workload"], f["block_bytes"], f["depth"]), (workload, block, 32))
            self.assertEqual((f["mismatches"], f["errors"]), (0, 0))
            self.assertGreater(f["ios"], 32)
            self.assertGreaterEqual(f["seconds"], 1)
            self.assertAlmostEqual(f["iops"], f["ios"] / f["seconds"], delta=f["iops"] * 0.01 + 1)
            self.assertAlmostEqual(f["mib_s"], f["iops"] * block / MIB, delta=f["mib_s"] * 0.01 + 0.1)

    def test_buffered_reads_through_the_page_cache(self):
        p = run("read", self.disk, "randread", 4096, 8, 1, "buffered")
        self.assertEqual(p.returncode, 0, p.stderr)
        f = figures(p.stdout)
        self.assertEqual((f["mismatches"], f["errors"]), (0, 0))
        self.assertGreater(f["ios"], 8)

    def test_a_changed_word_is_caught(self):
        with open(self.disk, "r+b") as disk:
            disk.seek(3 * MIB + 16)
            disk.write(b"MVMM-BAD")
        p = run("read", self.disk, "seqread", 65536, 4, 1)
        self.assertEqual(p.returncode, 1)
        self.assertGreater(figures(p.stdout)["mismatches"], 0)

    def test_bad_arguments(self):
        for args in (("read", self.disk, "randwrite", 4096, 32, 1), ("read", self.disk, "randread", 4000, 32, 1),
                     ("read", self.disk, "randread", 4096, 0, 1), ("fill", self.disk, "x"), ("read",),
                     ("read", self.disk, "randread", 4096, 32, 1, "cached")):
            self.assertEqual(run(*args).returncode, 2, args)
        p = run("read", self.dir / "missing", "randread", 4096, 32, 1)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot open", p.stderr)


if __name__ == "__main__":
    unittest.main()
