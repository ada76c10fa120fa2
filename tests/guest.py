"""Boots the default guest with mvmm for integration tests, directly where this host's KVM can run a standard
guest and otherwise inside the test host VM (mvmmtools.testhost), and checks what the guest printed.

Several mvmm runs share one test host boot (run_all), since starting the test host costs ~10 s. The tools' package
is imported from tools/, which meson's test environment puts on PYTHONPATH (by hand: PYTHONPATH=tools)."""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from mvmmtools import REPO  # noqa: F401 (for the tests)
from mvmmtools.images.build import get as guest_image
from mvmmtools.testhost import EXIT_HUNG, PEER_QEMU, boot_mode, disk_device
from mvmmtools.testhost.vm import HostConfig, TestHost

SKIP = 77  # meson's exit code for a skipped test


def mvmm_binary():
    path = os.environ.get("MVMM")
    if not path or not Path(path).exists():
        sys.exit("MVMM must name the built mvmm binary (meson test sets it)")
    return str(Path(path).resolve())


def mvmm_ctl_binary():
    path = os.environ.get("MVMM_CTL")
    if not path or not Path(path).exists():
        sys.exit("MVMM_CTL must name the built mvmm-ctl binary (meson test sets it)")
    return str(Path(path).resolve())


@dataclass
class Run:
    """One mvmm invocation: its arguments, and after running, its exit code and console output."""
    args: list
    disk_images: list = field(default_factory=list)  # files the test inspects afterwards
    scratch_images: dict = field(default_factory=dict)  # path -> size: sparse images made where mvmm runs
    hugepages: int = None  # 2 MiB hugepages to reserve where mvmm runs (given back afterwards)
    # Shell commands run next to mvmm while it runs (busybox sh in the test host): $MVMM_CTL is
    # tools/mvmm-ctl, $MVMM_LOG the file mvmm's output goes to, $MVMM_PID mvmm's pid; their output is
    # `companion_output`.
    companion: str = None
    companion_output: str = ""
    # Shell commands run where mvmm ran, right after it exited (e.g. `cat` its --report file); their output
    # is `after_output`.
    after: str = None
    after_output: str = ""
    # In the test host, only what mvmm flushed reaches the disk_images' files (see FLUSHED_ONLY). Directly on
    # this host the page cache shows unflushed writes in the files anyway: there a flush cannot be seen.
    flushed_only: bool = False
    # Run Debian's QEMU (mvmmtools.testhost.PEER_QEMU: -accel kvm -M q35 -cpu host -nographic -no-reboot) with these
    # arguments instead of mvmm, as the peer a test compares mvmm's guest-visible behaviour with.
    peer_qemu: bool = False
    run_timeout: int = None  # s mvmm may run in the test host before it is killed as hung (default RUN_TIMEOUT)
    # Where mvmm runs in the test host: more files copied in at their paths (what the arguments name is copied
    # anyway; e.g. qcow2 backing files), and programs copied in with their libraries (for `after`).
    files: list = field(default_factory=list)
    binaries: list = field(default_factory=list)
    code: int = None
    output: str = ""

    def markers(self, name):
        """[(uptime, {key: value})] of every `MVMM-MARK name` line."""
        found = []
        for m in re.finditer(r"MVMM-MARK (\S+) (\S+)([^\r\n]*)", self.output):
            if m.group(1) == name:
                found.append((float(m.group(2)), dict(kv.split("=", 1) for kv in m.group(3).split() if "=" in kv)))
        return found


def guest_args(cmdline="", memory="512M", cpus=1, extra=()):
    return ["--kernel", guest_image("kernel"), "--initrd", guest_image("guest_initrd"), "--memory", memory,
            "--cpus", str(cpus), "--cmdline", ("console=ttyS0 quiet " + cmdline).strip(), *extra]


def run_all(runs, timeout=600):
    """Runs every Run in order, filling in code and output."""
    mode, why = boot_mode()
    if mode is None:
        raise SkipTest(why)
    mvmm = mvmm_binary()
    if mode == "direct":
        for r in runs:
            for path, size in r.scratch_images.items():
                with open(path, "wb") as f:
                    f.truncate(size)
            with reserved_hugepages(r.hugepages), tempfile.NamedTemporaryFile("w+") as log, \
                    tempfile.NamedTemporaryFile("w+") as messages:
                program = PEER_QEMU if r.peer_qemu else [mvmm]
                p = subprocess.Popen([*program, *r.args], stdout=log, stderr=messages)
                if r.companion:
                    env = dict(os.environ, MVMM_CTL=mvmm_ctl_binary(), MVMM_LOG=log.name, MVMM_PID=str(p.pid))
                    r.companion_output = subprocess.run(["sh", "-c", r.companion], env=env, capture_output=True,
                                                        text=True, timeout=timeout).stdout
                r.code = p.wait(timeout=timeout)
                r.output = Path(log.name).read_text(errors="replace") + Path(messages.name).read_text(errors="replace")
            if r.after:
                r.after_output = subprocess.run(["sh", "-c", r.after], capture_output=True, text=True).stdout
        return
    _run_in_hostvm(mvmm, runs, timeout)


class Hang(AssertionError):
    """The test host VM, or a guest or mvmm inside it, stopped making progress: a failure, never retried."""


KILLED = 128 + 9  # exit code of a run that busybox timeout -s KILL ended
# The test host's kernel writes a block device's dirty page cache back when its last opener closes it, and when
# its flusher thread runs: either would put a write that mvmm never fdatasync'ed into the outer image file. So
# each disk is held open by a process that outlives the scenario (deaf to the SIGHUP of its end), and the flusher
# sleeps for a day: it is woken that long after a device's first dirty page (with 0, meant as "no periodic
# writeback", it is woken at once, and it wrote mvmm's unflushed pages back: seen here). The test host powers off
# without a sync (hostvm/init): what mvmm did not flush is lost.
FLUSHED_ONLY = ["echo 8640000 > /proc/sys/vm/dirty_writeback_centisecs",
                "echo 8640000 > /proc/sys/vm/dirty_expire_centisecs"]
HOLD_OPEN = "(trap '' HUP; exec sleep 1000000) <{} &"
RUN_TIMEOUT = 300  # seconds for one mvmm run inside the test host; a 64-disk boot takes under 90
# mvmm's own messages (stderr) go to a file of their own and follow the guest's console (stdout) in Run.output:
# the UART writes the guest's bytes as they come, so a message written to the same file would land inside a
# guest line, and a marker would lose its end (seen: hot-plug's "removal requested" inside a hotplug-written).


def _run_in_hostvm(mvmm, runs, timeout):
    images = [img for r in runs for img in r.disk_images]
    device = {img: disk_device(i) for i, img in enumerate(images)}
    files = set()
    binaries = set()
    lines = []
    for i, r in enumerate(runs):
        files.update(r.files)
        binaries.update(r.binaries)
        words = []
        for a in r.args:
            for img, dev in device.items():
                a = a.replace(img, dev)
            words.append(a)
            for piece in re.split(r"[=,:]", a):
                if (piece.startswith("/") and Path(piece).is_file() and piece not in device.values()
                        and piece not in r.scratch_images):
                    files.add(piece)
        for path, size in r.scratch_images.items():
            lines.append(f"mkdir -p {shlex.quote(str(Path(path).parent))}")
            lines.append(f"dd if=/dev/zero of={shlex.quote(path)} bs=512 count=0 seek={size // 512} 2>/dev/null")
        if r.hugepages is not None:
            lines.append(f"echo {r.hugepages} > {NR_HUGEPAGES}")
        if r.flushed_only:
            lines += FLUSHED_ONLY + [HOLD_OPEN.format(device[img]) for img in r.disk_images]
        program = "$PEER_QEMU" if r.peer_qemu else '"$MVMM"'
        command = f'timeout -s KILL {r.run_timeout or RUN_TIMEOUT} {program} {" ".join(shlex.quote(w) for w in words)}'
        lines.append(f'echo "MVMM-RUN-BEGIN {i}"')
        if r.companion:
            files.add(mvmm_ctl_binary())
            # The subshell execs timeout, which execs mvmm (busybox's timeout watches from a child): $! is mvmm.
            lines += [f"MVMM_CTL={mvmm_ctl_binary()} MVMM_LOG=/tmp/mvmm-run-{i}.log",
                      f'(hostvm_announce "$MVMM"; exec {command}) >"$MVMM_LOG" 2>"$MVMM_LOG.messages" & MVMM_PID=$!',
                      f'echo "MVMM-COMPANION-BEGIN {i}"', r.companion, f'echo "MVMM-COMPANION-END {i}"',
                      'wait $MVMM_PID; code=$?', 'cat "$MVMM_LOG"; echo; cat "$MVMM_LOG.messages"',
                      f'echo "MVMM-RUN-END {i} $code"']
        else:
            lines += [f"hostvm_exec {command} 2>/tmp/mvmm-messages-{i}.log; code=$?",
                      f"cat /tmp/mvmm-messages-{i}.log", f'echo "MVMM-RUN-END {i} $code"']
        if r.after:
            lines += [f'echo "MVMM-AFTER-BEGIN {i}"', r.after, f'echo "MVMM-AFTER-END {i}"']
    output = []
    with tempfile.NamedTemporaryFile("w", suffix=".sh") as script:
        script.write("\n".join(lines) + "\n")
        script.flush()
        host = TestHost(HostConfig(mvmm=mvmm, script=script.name, disk_images=tuple(images),
                                   files=tuple(sorted(files)), binaries=tuple(sorted(binaries)),
                                   timeout=timeout, peer_qemu=any(r.peer_qemu for r in runs)))
        code = host.run(output.append)
    out = b"".join(output).decode(errors="replace") + "".join(f"{m}\n" for m in host.messages)
    if code == EXIT_HUNG:
        raise Hang("the test host VM hung:\n" + out[-3000:])
    for i, r in enumerate(runs):
        m = re.search(rf"MVMM-RUN-BEGIN {i}\r?\n(.*?)MVMM-RUN-END {i} (\d+)", out, re.S)
        if not m:
            raise Hang(f"run {i} did not finish in the test host (exit {code}):\n" + out[-3000:])
        r.output, r.code = m.group(1), int(m.group(2))
        if r.code == KILLED:
            raise Hang(f"run {i} made no progress for {r.run_timeout or RUN_TIMEOUT} s and was killed:\n" + r.output[-3000:])
        c = re.search(rf"MVMM-COMPANION-BEGIN {i}\r?\n(.*?)MVMM-COMPANION-END {i}", r.output, re.S)
        if c:
            r.companion_output = c.group(1)
        a = re.search(rf"MVMM-AFTER-BEGIN {i}\r?\n(.*?)MVMM-AFTER-END {i}", out, re.S)
        if a:
            r.after_output = a.group(1)


class SkipTest(Exception):
    pass


NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


class reserved_hugepages:
    """Reserves `count` 2 MiB hugepages on this host for a with-block and gives them back after."""

    def __init__(self, count):
        self.count = count

    def __enter__(self):
        if self.count is None:
            return
        if os.geteuid() != 0:
            raise SkipTest("reserving hugepages needs root")
        self.saved = Path(NR_HUGEPAGES).read_text().strip()
        Path(NR_HUGEPAGES).write_text(str(self.count))
        if int(Path(NR_HUGEPAGES).read_text()) < self.count:
            self.__exit__()
            raise SkipTest(f"the host could not reserve {self.count} hugepages")

    def __exit__(self, *exc):
        if self.count is not None:
            Path(NR_HUGEPAGES).write_text(self.saved)


def main(cases):
    """Runs test functions (those named on the command line, if any), prints one line each and a summary; exits 1
    on failure, 77 if all skipped."""
    passed = failed = skipped = 0
    chosen = sys.argv[1:]
    unknown = set(chosen) - {c.__name__ for c in cases}
    if unknown:
        sys.exit(f"no test named {', '.join(sorted(unknown))}; tests: {', '.join(c.__name__ for c in cases)}")
    for case in [c for c in cases if not chosen or c.__name__ in chosen]:
        try:
            case()
            print(f"ok: {case.__name__}", flush=True)
            passed += 1
        except SkipTest as e:
            print(f"skip: {case.__name__}: {e}", flush=True)
            skipped += 1
        except Exception:
            print(f"FAIL: {case.__name__}\n{traceback.format_exc()}", flush=True)
            failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    sys.exit(1 if failed else SKIP if skipped and not passed else 0)


def expect(condition, message, run=None):
    if not condition:
        raise AssertionError(message + ("\n--- output ---\n" + run.output[-4000:] if run else ""))
