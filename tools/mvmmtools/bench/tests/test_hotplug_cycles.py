"""hotplug_cycles.sh (boot-bench --hotplug-cycles, tests/hotplug_test.py) against a stand-in VMM: a cycle whose
guest never reports the disk ends the run with an HP-ERROR line naming the step it waited for, within the cycle's
limit, instead of waiting for ever."""

import os
import stat
import subprocess
import tempfile
import time
import unittest
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
