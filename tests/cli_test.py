#!/usr/bin/env python3
"""mvmm's command line on this host: bad input and unusable hosts give one clear line and exit 2, fast."""

import os
import subprocess
import tempfile
import time
from pathlib import Path

import guest
from guest import expect


def mvmm(*args):
    start = time.monotonic()
    p = subprocess.run([guest.mvmm_binary(), *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - start


def kernel():
    return guest.guest_image("kernel")


def test_help_and_version():
    code, out, _ = mvmm("--help")
    expect(code == 0 and "--kernel" in out, f"--help: exit {code}\n{out}")
    code, out, _ = mvmm("--version")
    expect(code == 0 and out.startswith("mvmm "), f"--version: exit {code}\n{out}")


def test_bad_input_exits_2_with_one_line():
    with tempfile.TemporaryDirectory() as tmp:
        not_kernel = Path(tmp) / "notes.txt"
        not_kernel.write_text("hello\n" * 400)
        truncated = Path(tmp) / "truncated"
        truncated.write_bytes(Path(kernel()).read_bytes()[:4096])
        big_initrd = Path(tmp) / "big-initrd"
        with open(big_initrd, "wb") as f:
            f.truncate(60 << 20)
        old_log = Path(tmp) / "old.log"
        old_log.write_text("the last run's console\n")
        cases = [
            (["--kernel", "/no/such/kernel"], "does not exist"),
            (["--kernel", str(not_kernel)], "bzImage"),
            (["--kernel", str(truncated)], "truncated"),
            (["--kernel", tmp], "not a regular file"),
            (["--kernel", kernel(), "--cpus", "0"], "--cpus"),
            (["--kernel", kernel(), "--memory", "64T"], "more than this host has"),
            (["--kernel", kernel(), "--memory", "12Q"], "size"),
            (["--kernel", kernel(), "--serial", "tcp:1"], "--serial"),
            (["--kernel", kernel(), "--no-such-flag"], "no-such-flag"),
            (["--kernel", kernel(), "--initrd", "/no/such/initrd"], "does not exist"),
            (["--kernel", kernel(), "--io-threads", "100000"], "--io-threads"),
            (["--kernel", kernel(), "--io-threads", "0"], "--io-threads"),
            (["--kernel", kernel(), "--trim-factor", "nan"], "--trim-factor"),
            (["--kernel", kernel(), *disks(249)], "--disk"),
            (["--kernel", kernel(), *disks(32, ",bus=root")], "--disk"),
            (["--kernel", kernel(), *disks(31, ",bus=root"), *disks(1)], "--disk"),
            (["--kernel", kernel(), "--disk", "path=/no/a.img,controller=c9"], "controller=c9"),
            (["--kernel", kernel(), "--scsi-controller", "id=c0", "--scsi-controller", "id=c0"], "given twice"),
            (["--kernel", kernel(), "--scsi-controller", "id=c0", *scsi_disks(2, ",lun=3")], "has LUN 3 already"),
            (["--kernel", kernel(), "--scsi-controller", "id=c0", *scsi_disks(1, ",lun=16384")], "lun=16384"),
            (["--kernel", kernel(), "--scsi-controller", "id=c0,queues=65"], "queues=65"),
            (["--kernel", kernel(), "--scsi-controller", "id=c0", "--empty-root-ports", "248"],
             "--empty-root-ports"),
            (["--kernel", kernel(), "--memory", "64M", "--initrd", str(big_initrd)], "initrd"),
            (["--kernel", kernel(), "--serial", f"file:{tmp}/no/such/dir/log"], "--serial"),
            (["--kernel", kernel(), "--serial", f"file:{old_log}", "--cpus", "0"], "--cpus"),
        ]
        for args, fragment in cases:
            code, out, _ = mvmm(*args)
            expect(code == 2, f"{args}: exit {code}, expected 2\n{out}")
            expect(fragment in out, f"{args}: message lacks '{fragment}':\n{out}")
            expect(len(out.strip().splitlines()) <= 2, f"{args}: more than one error line:\n{out}")
            expect("Traceback" not in out and "terminate called" not in out, f"{args}: crashed\n{out}")
        expect(old_log.read_text() == "the last run's console\n", "a failed run truncated its --serial file")
        expect(not Path(f"{tmp}/no").exists(), "a failed run created files")


def disks(count, options=""):
    """--disk arguments for `count` images that need not exist: counts are checked before any file."""
    return [a for i in range(count) for a in ("--disk", f"path=/no/such/disk{i}.img{options}")]


def scsi_disks(count, options=""):
    """--disk arguments for `count` LUNs of controller c0 on images that need not exist."""
    return [a for i in range(count) for a in ("--disk", f"path=/no/such/lun{i}.img,controller=c0{options}")]


def test_pvm_host_refuses_quickly():
    if not Path("/sys/module/kvm_pvm").exists():
        raise guest.SkipTest("this host's /dev/kvm is not PVM")
    code, out, seconds = mvmm("--kernel", kernel(), "--initrd", guest.guest_image("guest_initrd"))
    expect(code == 2, f"exit {code}, expected 2\n{out}")
    expect("PVM" in out and "mvmm-hostvm" in out, f"message does not explain PVM:\n{out}")
    expect(seconds < 1.0, f"took {seconds:.2f} s, expected under 1 s")


if __name__ == "__main__":
    os.environ.setdefault("MVMM", "build/vmm/mvmm")
    guest.main([test_help_and_version, test_bad_input_exits_2_with_one_line, test_pvm_host_refuses_quickly])
