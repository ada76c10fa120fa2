"""hotplug_cycles.sh (boot-bench --hotplug-cycles, tests/hotplug_test.py) against a stand-in VMM: a cycle whose
guest never reports the disk ends the run with an HP-ERROR line naming the step it waited for, within the cycle's
limit, instead of waiting for ever."""

import os
import stat
import subprocess
import tempfile
import time
import unittest
import unittest.mock
from pathlib import Path

from mvmmtools.bench import hotplug

# A stand-in mvmm-ctl: add-disk is accepted, query-disks lists the disk, query-memory has figures.
FAKE_CTL = """#!/bin/sh
for word in "$@"; do
	case $word in
	add-disk) echo '{"id":"disk1","port":1}' ;;
	query-disks) echo '{"disks":[{"id":"disk1"}],"bar_regions":3}' ;;
	query-memory) echo '{"by_policy":{"trims":0,"time_ns":0},"arena":0,"hblkhd":0}' ;;
	esac
done
"""


class CycleLimit(unittest.TestCase):
    def run_cycles(self, log_text, limit_s=1):
        with tempfile.TemporaryDirectory() as tmp:
            ctl = Path(tmp) / "mvmm-ctl"
            ctl.write_text(FAKE_CTL)
            ctl.chmod(ctl.stat().st_mode | stat.S_IEXEC)
            log = Path(tmp) / "console.log"
            log.write_text(log_text)
            env = dict(os.environ, MVMM_CTL=str(ctl), MVMM_LOG=str(log), MVMM_PID=str(os.getpid()),
                       HP_SOCKET=f"{tmp}/socket", HP_DIR=tmp, HP_CYCLES="1", HP_MODE="eject",
                       HP_CYCLE_LIMIT=str(limit_s))
            started = time.monotonic()
            out = subprocess.run(["sh", str(hotplug.CYCLES_SCRIPT)], env=env, capture_output=True, text=True,
                                 timeout=30).stdout
            return out, time.monotonic() - started

    def test_a_guest_that_never_reports_the_disk_ends_the_run_with_a_reason(self):
        out, took = self.run_cycles("MVMM-MARK hotplug-start\n")
        self.assertIn("HP-ERROR i=0 no hotplug-ready marker from the guest within 1 s", out)
        self.assertNotIn("HP-CYCLE", out)
        self.assertLess(took, 15)

    def test_a_disk_the_vmm_never_releases_ends_the_run_with_a_reason(self):
        out, _ = self.run_cycles("MVMM-MARK hotplug-start\nMVMM-MARK hotplug-ready 1.0 i=0 disk=vda ok=1\n")
        self.assertIn("HP-ERROR i=0 no release of the disk by the VMM within 1 s", out)


if __name__ == "__main__":
    unittest.main()


class Streaming(unittest.TestCase):
    """boot-bench prints a variant's figures when the variant ends, not only when the whole run does."""

    CYCLE = "HP-CYCLE i={i} ms=1500 heap_kib=8 malloc_kib=9 rss_kib=10 vmm_rss_kib=11 fds=17 trims=2 trim_ns=1000\r\n"

    def test_a_variants_line_comes_as_it_ends_and_the_console_is_kept(self):
        console = ("HP-BENCH-BEGIN mvmm-off\r\n" + "".join(self.CYCLE.format(i=i) for i in range(4)) +
                   "exit stats: as_rebuilds=12\r\nHP-BENCH-END mvmm-off 0\r\nHP-BENCH-BEGIN qemu\r\n")
        with tempfile.TemporaryDirectory() as tmp, \
                unittest.mock.patch("builtins.print") as printed, unittest.mock.patch.object(hotplug, "say"):
            stream = hotplug.Stream(4, Path(tmp))
            for at in range(0, len(console), 7):  # chunks that cut lines and markers in two
                stream(console[at:at + 7].encode())
            lines = [call.args[0] for call in printed.call_args_list]
            self.assertEqual(2, len(lines), lines)  # the header, then mvmm-off's line; qemu has not ended
            self.assertRegex(lines[1], r"^mvmm-off +4 +1500 +1500 +8->8 .* 12$")
            stream.close()
            self.assertEqual(console.encode(), (Path(tmp) / "hotplug-console.txt").read_bytes())
