"""boot-bench --disk-delay-ms: the option parsed and refused where it cannot hold, the test host script that puts
the raw disks behind dm-delay (bb_delay, run here with stand-in losetup, blockdev and dmsetup) and reads the first
delayed device for the host-side limit, both VMMs' disk options, and the summary's words for it."""

import os
import stat
import subprocess
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from mvmmtools.bench import boot_bench, runner, tables
from mvmmtools.bench.boot_bench_options import parse_args
from mvmmtools.bench.guest_config import Guest, Machine, mvmm_args, qemu_args
from mvmmtools.bench.tests.test_qcow2_options import refused, words_after

RUNNER = Path(runner.__file__).resolve().parent / "boot_bench_runner.sh"
# Stand-ins for the test host's tools: each logs its arguments; dmsetup mknodes makes the mapper "node".
STUBS = {
    "losetup": '[ "$1" != -f ] || echo /dev/loop3',
    "blockdev": "echo 524288",
    "dmsetup": '[ "$1" = create ] && [ -n "${FAIL_CREATE:-}" ] && exit 1\n'
               '[ "$1" = mknodes ] && : >"$BB_MAPPER/$2"\nexit 0',
}


class Options(unittest.TestCase):
    def test_the_delay_reaches_every_machine_of_the_matrix(self):
        args = parse_args(["--io", "--disks", "1,2", "--disk-delay-ms", "10"])
        self.assertEqual([m.delay_ms for m in boot_bench.matrix(args)], [10, 10])
        self.assertEqual([m.delay_ms for m in boot_bench.matrix(parse_args(["--io"]))], [None])

    def test_refused_with_qcow2_no_disks_a_bad_delay_and_hotplug(self):
        self.assertIn("--disk-format raw", refused(["--io", "--disk-format", "qcow2", "--disk-delay-ms", "10"]))
        self.assertIn("--disk-format raw", refused(["--io", "--disk-format", "raw,qcow2", "--disk-delay-ms", "10"]))
        self.assertIn("--disks 1 or more", refused(["--disks", "0", "--disk-delay-ms", "10"]))
        self.assertIn("1..10000 ms", refused(["--io", "--disk-delay-ms", "0"]))
        self.assertIn("--disk-delay-ms", refused(["--hotplug-cycles", "3", "--disk-delay-ms", "10"]))
        self.assertIn("--perf", refused(["--hotplug-cycles", "3", "--perf"]))  # its runs take no profile
        self.assertIsNone(refused(["--io", "--disks", "2", "--disk-delay-ms", "10"]))

    def test_refused_where_the_runs_would_happen_on_this_machine(self):
        with mock.patch.object(boot_bench, "direct_kvm_usable", return_value=True):
            with self.assertRaisesRegex(runner.SetupError, "test host VM only"):
                boot_bench.dmsetup_binary()


class VmmDisks(unittest.TestCase):
    GUEST = Guest("/k", "/i")

    def test_both_vmms_get_the_delayed_devices_with_cache_none(self):
        machine = Machine(disks=2, delay_ms=10)
        self.assertEqual(words_after(mvmm_args(self.GUEST, machine, aio="sync"), "--disk"),
                         [f"path=/dev/mapper/bb-delay{i},cache=none,aio=sync" for i in range(2)])
        self.assertEqual(words_after(qemu_args(self.GUEST, machine), "-drive"),
                         [f"file=/dev/mapper/bb-delay{i},format=raw,cache=none,if=none,id=d{i}" for i in range(2)])

    def test_undelayed_disks_stay_files_with_the_vmms_default_cache(self):
        disks = words_after(mvmm_args(self.GUEST, Machine(disks=1)), "--disk")
        self.assertEqual(disks, ["path=/tmp/boot-bench/disk0.img"])


class HostScript(unittest.TestCase):
    def test_the_disks_go_behind_dm_delay_before_the_host_side_reads_of_the_first(self):
        script = runner.host_script("boot-bench", 2, [("t1", 60, "mvmm", ["--x"])], filled=(256, "/bin/mvmm-io"),
                                    host_io_seconds=5, delay_ms=10)
        lines = script.splitlines()
        made = lines.index("bb_disks 2 256 /bin/mvmm-io || exit 1")
        self.assertEqual(lines[made + 1:made + 4], ["bb_delay 2 10 || exit 1",
                                                    "bb_host_io /bin/mvmm-io 5 /dev/mapper/bb-delay0",
                                                    "bb_run t1 60 vmm_mvmm --x"])

    def test_no_delay_without_the_option_or_without_disks(self):
        for disks, delay in ((1, None), (0, 10)):
            script = runner.host_script("boot-bench", disks, [], filled=(256, "/x"), host_io_seconds=5,
                                        delay_ms=delay).split("# written by tools/boot-bench")[1]
            self.assertNotIn("\nbb_delay ", script)
            self.assertNotIn("/dev/mapper", script)

    def run_shell(self, tmp, commands, **env):
        tools = Path(tmp, "bin")
        tools.mkdir(exist_ok=True)
        for name, body in STUBS.items():
            stub = tools / name
            stub.write_text(f'#!/bin/sh\necho "{name} $*" >>"{tmp}/calls"\n{body}\n')
            stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
        mapper = Path(tmp, "mapper")
        mapper.mkdir(exist_ok=True)
        env = dict(os.environ, PATH=f"{tools}:{os.environ['PATH']}", BB_MAPPER=str(mapper), **env)
        out = subprocess.run(["sh", "-c", f'. "{RUNNER}"; BB_DIR={tmp}; {commands}'], text=True,
                             capture_output=True, env=env)
        calls = Path(tmp, "calls").read_text().splitlines() if Path(tmp, "calls").exists() else []
        return out, calls

    def test_bb_delay_makes_a_loop_device_and_a_delay_target_per_disk(self):
        with tempfile.TemporaryDirectory() as tmp:
            out, calls = self.run_shell(tmp, "bb_delay 2 10")
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(calls, [
            "losetup -f", f"losetup /dev/loop3 {tmp}/disk0.img", "blockdev --getsz /dev/loop3",
            "dmsetup create bb-delay0 --table 0 524288 delay /dev/loop3 0 10", "dmsetup mknodes bb-delay0",
            "losetup -f", f"losetup /dev/loop3 {tmp}/disk1.img", "blockdev --getsz /dev/loop3",
            "dmsetup create bb-delay1 --table 0 524288 delay /dev/loop3 0 10", "dmsetup mknodes bb-delay1"])

    def test_bb_delay_fails_with_an_error_line_when_dmsetup_does(self):
        with tempfile.TemporaryDirectory() as tmp:
            out, calls = self.run_shell(tmp, "bb_delay 2 10", FAIL_CREATE="1")
        self.assertEqual(out.returncode, 1)
        self.assertEqual(out.stdout, f"BOOTBENCH-ERROR cannot put {tmp}/disk0.img behind dm-delay\n")
        self.assertNotIn("dmsetup mknodes bb-delay0", calls)

    def test_bb_host_io_reads_the_delayed_device_with_o_direct(self):
        with tempfile.TemporaryDirectory() as tmp:
            filler = Path(tmp, "mvmm-io")
            filler.write_text(f'#!/bin/sh\necho "mvmm-io $*" >>"{tmp}/calls"\necho "workload=$3 iops=100"\n')
            filler.chmod(filler.stat().st_mode | stat.S_IXUSR)
            out, calls = self.run_shell(tmp, f'bb_host_io "{filler}" 3 /dev/mapper/bb-delay0')
        self.assertEqual(calls, ["mvmm-io read /dev/mapper/bb-delay0 randread 4096 32 3",
                                 "mvmm-io read /dev/mapper/bb-delay0 seqread 65536 32 3"])
        self.assertEqual(out.stdout.count("BOOTBENCH-HOSTIO workload="), 2)


class Summary(unittest.TestCase):
    def test_the_host_side_limit_says_it_read_the_delayed_device(self):
        host_io = [{"workload": "randread", "iops": 2000}]
        summary = {"1 disk": {"mvmm": {"metrics": {"randread_iops": {"median": 100, "min": 90, "max": 110}}}}}
        text = "\n".join(tables.host_limit_lines(host_io, summary, 10))
        self.assertIn("first disk's delayed device (10 ms dm-delay; O_DIRECT", text)
        self.assertIn("first disk's file (page cache", "\n".join(tables.host_limit_lines(host_io, summary)))


if __name__ == "__main__":
    unittest.main()
