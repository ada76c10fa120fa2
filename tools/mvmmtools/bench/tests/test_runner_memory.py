"""boot_bench_runner.sh's memory and CPU lines: the awk in bb_stamp reads a recorded /proc/<pid> (data/proc/4242, an
abridged smaps of a VMM) when the guest's marker comes, and splits glibc's thread arenas from the rest."""

import os
import subprocess
import tempfile
import unittest
from pathlib import Path

from mvmmtools.bench.runs import cpu_snapshot, key_values

HERE = Path(__file__).resolve().parent
RUNNER = HERE.parent / "boot_bench_runner.sh"


def memory_line(console):
    with tempfile.TemporaryDirectory() as tmp:
        pidfile = Path(tmp, "pid")
        pidfile.write_text("4242\n")
        script = f'. "{RUNNER}"; bb_stamp t "{pidfile}" "{tmp}/log"'
        env = dict(os.environ, BB_PROC=str(HERE / "data" / "proc"), BB_MEM_AT="MVMM-MARK poweroff")
        out = subprocess.run(["sh", "-c", script], input=console, env=env, text=True, capture_output=True,
                             check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("BOOTBENCH-MEM t ")]
    return key_values(lines[0][len("BOOTBENCH-MEM t "):]) if lines else None


class MemoryLine(unittest.TestCase):
    def setUp(self):
        self.mem = memory_line("booting\nMVMM-MARK poweroff 1.2\n")

    def test_read_at_the_marker_only(self):
        self.assertIsNone(memory_line("booting\nMVMM-MARK init 0.5\n"))

    def test_guest_ram_is_the_largest_mapping(self):
        self.assertEqual(self.mem["hwm_kib"], 300000)
        self.assertEqual(self.mem["mapping_kib"], 262144)
        self.assertEqual(self.mem["guest_kib"], 200000)
        self.assertEqual(self.mem["guest_thp_kib"], 196608, "its AnonHugePages")

    def test_the_main_arena_is_the_heap_mapping(self):
        self.assertEqual((self.mem["heap_rss_kib"], self.mem["heap_size_kib"]), (6000, 8192))

    def test_thread_arenas_are_64_mib_reservations(self):
        # The grown arena and the full one; not the thread stack, the short reservation, guest RAM or the file.
        self.assertEqual(self.mem["arenas"], 2)
        self.assertEqual(self.mem["arena_rss_kib"], 19000 + 30000)
        self.assertEqual(self.mem["arena_size_kib"], 19572 + 65536)


if __name__ == "__main__":
    unittest.main()


class CpuLine(unittest.TestCase):
    """The CPU snapshot bb_stamp takes at the guest's io-start and io markers: the process's time and each
    thread's, with names that have spaces and parentheses ("CPU 0/KVM", QEMU's) kept readable."""

    def test_a_snapshot_per_io_marker(self):
        with tempfile.TemporaryDirectory() as tmp:
            proc = Path(tmp, "proc", "77")
            stats = {"77": ("qemu-system-x86", 40, 5), "78": ("CPU 0/KVM", 300, 200), "79": ("iou-wrk-77", 0, 9)}
            for tid, (name, user, system) in stats.items():
                Path(proc, "task", tid).mkdir(parents=True)
                Path(proc, "task", tid, "stat").write_text(
                    f"{tid} ({name}) S 1 77 77 0 -1 4194560 10 0 0 0 {user} {system} 0 0 20 0 3 0\n")
            Path(proc, "stat").write_text("77 (qemu-system-x86) S 1 77 77 0 -1 4194560 10 0 0 0 400 260 0 0\n")
            pidfile = Path(tmp, "pid")
            pidfile.write_text("77\n")
            script = f'. "{RUNNER}"; bb_stamp t "{pidfile}" "{tmp}/log"'
            env = dict(os.environ, BB_PROC=str(Path(tmp, "proc")))
            out = subprocess.run(["sh", "-c", script], input="MVMM-MARK init 1\nMVMM-MARK io-start 2.0\n"
                                 "MVMM-MARK io 3.0 workload=randread\nMVMM-MARK io-done 4.0\n",
                                 env=env, text=True, capture_output=True, check=True).stdout
        lines = [line.split(" ", 3)[3] for line in out.splitlines() if line.startswith("BOOTBENCH-CPU t ")]
        self.assertEqual([cpu_snapshot(line)[0] for line in lines], ["io-start", "io"])
        self.assertEqual(cpu_snapshot(lines[0])[1:], (660, {77: ("qemu-system-x86", 45), 78: ("CPU_0/KVM", 500),
                                                            79: ("iou-wrk-77", 9)}))
