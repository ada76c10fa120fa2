"""Boots VMMs one after another inside ONE test host VM boot and collects what each printed: shared by
tools/boot-bench (times) and tools/boot-soak (reliability).

The test host side is boot_bench_runner.sh: its BOOTBENCH-* lines carry the test host's /proc/uptime, so times are
measured inside the test host, free of the console relay's delay (runs.py reads them). Where /dev/kvm runs standard
guests (hardware VMX/SVM), the same script runs directly on this machine instead."""

import dataclasses
import hashlib
import os
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from mvmmtools.bench.guest_config import DISK_SIZE_MIB, Guest, Machine, delayed_disk, mvmm_args, qemu_args
from mvmmtools.images import BuildError
from mvmmtools.images.build import get
from mvmmtools.process import Lines, stop
from mvmmtools.testhost import EXIT_FIXTURE, EXIT_HUNG, PEER_QEMU, direct_kvm_usable
from mvmmtools.testhost.vm import TestHost

RUNNER = Path(__file__).resolve().parent / "boot_bench_runner.sh"
TEST_HOST_BOOT = 300  # s allowed for building the layers and booting the test host
# A test host that ended by itself without the script's result, and why.
ENDED_WITHOUT_RESULT = {EXIT_HUNG: "mvmm-hostvm reported a hang (nothing ended within its time limit)",
                        130: "interrupted"}
KIB_PER_MIB = 1024


class SetupError(Exception):
    """The tool cannot start (exit 2)."""


def guest_image(name):
    try:
        return get(name)
    except BuildError as e:
        raise SetupError(f"guest-images/build --get {name} failed:\n{e}") from None


def binary_id(path):
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
    return f"{path} (built {built}, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:12]})"


def resolved_mvmm(path):
    if not path.is_file():
        raise SetupError(f"{path}: no mvmm binary (build it with tools/build, or pass --mvmm PATH)")
    return path.resolve()


# --- what runs in the test host ---------------------------------------------------------------------------------

def quote(words):
    return " ".join(shlex.quote(w) for w in words)


def runner_script(tool, disks, kernel, initrd, runs, qemu_firmware="seabios", mvmm_env=()):
    """The script for the test host (or sh, directly) that boots the default configuration with `disks` disks:
    runs = [(tag, limit_s, "mvmm"|"qemu", [extra arguments])] in order."""
    guest, machine = Guest(kernel, initrd), Machine(disks=disks)
    words = {"mvmm": mvmm_args(guest, machine), "qemu": qemu_args(guest, machine, qemu_firmware)}
    return host_script(tool, disks, [(tag, limit, vmm, words[vmm] + list(extra)) for tag, limit, vmm, extra in runs],
                       mvmm_env)


def host_script(tool, disks, runs, mvmm_env=(), binaries=None, hugepages=0, filled=None, memory_at=None,
                overlays=None, host_io_seconds=None, delay_ms=None, perf=False):
    """The runner's helpers, one exec-function per VMM binary (vmm_mvmm runs $MVMM, vmm_qemu the peer QEMU,
    binaries = {name: path} adds vmm_NAME), `disks` sparse raw disks (filled = (MiB, mvmm-io): disks of that size
    holding its pattern), overlays = (N, MiB, mvmm-io, cluster bytes): N qcow2 overlays of a base of that size
    holding the pattern (qemu-img on the PATH), with delay_ms the raw disks behind dm-delay (bb_delay, dmsetup on the
    PATH), `hugepages` 2 MiB pages reserved, the memory read at the guest's line matching the awk regex `memory_at`
    (default: its poweroff marker), with host_io_seconds (and filled disks) the host-side reads of the first disk
    (its delayed device with delay_ms) first (bb_host_io), with perf a profile of each run from the guest's init
    marker (io-start with host_io_seconds: the I/O workloads) to its exit (perf on the PATH), then runs = [(tag, limit_s, function name, [arguments])] in order."""
    env = quote(mvmm_env) + " " if mvmm_env else ""
    lines = [RUNNER.read_text(), f"# written by tools/{tool}",
             # exec: the background job's process is the VMM itself, whose /proc entry the runner reads.
             f'vmm_mvmm() {{ {env}exec "$MVMM" "$@"; }}',
             'vmm_qemu() { exec $PEER_QEMU "$@"; }']
    lines += [f'vmm_{name}() {{ {env}exec {shlex.quote(str(path))} "$@"; }}' for name, path in (binaries or {}).items()]
    lines += [f"BB_MEM_AT={shlex.quote(memory_at)}"] if memory_at else []
    lines += ["BB_PERF=1"] + ([f"BB_PERF_AT={shlex.quote('MVMM-MARK io-start ')}"] if host_io_seconds else []) \
        if perf else []
    lines.append(f"bb_disks {disks} {quote([str(w) for w in filled or (DISK_SIZE_MIB,)])} || exit 1")
    delayed = bool(delay_ms and disks)
    if delayed:
        lines.append(f"bb_delay {disks} {delay_ms} || exit 1")
    if host_io_seconds and filled and disks:
        device = [delayed_disk(0)] if delayed else []
        lines.append(f"bb_host_io {quote([str(filled[1]), str(host_io_seconds), *device])}")
    if overlays:
        lines.append(f"bb_overlays {quote([str(w) for w in overlays])} || exit 1")
    if hugepages:
        lines.append(f"bb_hugepages {hugepages} || exit 1")
    for tag, limit, function, words in runs:
        lines.append(f"bb_run {tag} {limit:g} vmm_{function} {quote(words)}".rstrip())
    return "\n".join(lines) + "\n"


# --- running it ---------------------------------------------------------------------------------------------------

def run_script(config, script, collector, runs, run_timeout):
    """Runs the script in a test host booted with config (testhost.vm.HostConfig), or with sh directly where
    /dev/kvm runs standard guests: what it prints goes to the collector, the test host's own messages through to
    stderr. Returns (exit code, a sentence when the test host hung or None, the test host's messages)."""
    # No run goes that long without a runner line unless the test host itself is stuck (it may still print:
    # a test host whose CPUs are locked up prints its watchdog's soft lockup reports, and nothing else).
    silence = run_timeout + 120
    heard = [time.monotonic()]
    lines = Lines(collector.line)

    def output(data):
        heard[0] = time.monotonic()
        lines(data)

    def stuck():
        now = time.monotonic()
        if now - heard[0] > silence:
            return f"the test host printed nothing for {silence:g} s; stopped it"
        if now - collector.last_progress > silence:
            return f"no run started, ended or printed a marker for {silence:g} s; stopped the test host"
        return None

    if direct_kvm_usable():
        code, hang, messages = run_here(config, script, output, stuck)
    else:
        host = TestHost(dataclasses.replace(config, script=script,
                                            timeout=TEST_HOST_BOOT + runs * (run_timeout + 10)))
        code = host.run(output, stuck)
        hang, messages = host.stopped or ENDED_WITHOUT_RESULT.get(code), host.messages
    lines.end()
    return code, hang, messages


def run_here(config, script, output, stuck):
    """The script run by sh on this machine, in a session of its own (a hang is ended without touching others)."""
    env = dict(os.environ, PEER_QEMU=" ".join(PEER_QEMU), **({"MVMM": str(config.mvmm)} if config.mvmm else {}))
    proc = subprocess.Popen(["sh", script], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)
    messages = []

    def message(text):
        print(text, file=sys.stderr, flush=True)
        messages.append(text)

    said = Lines(message)
    sinks = {proc.stdout.fileno(): output, proc.stderr.fileno(): said}
    hang = None
    try:
        while sinks and not hang:
            ready, _, _ = select.select(list(sinks), [], [], 1.0)
            for fd in ready:
                data = os.read(fd, 65536)
                if data:
                    sinks[fd](data)
                else:
                    del sinks[fd]
            hang = stuck()
    except KeyboardInterrupt:
        hang = "interrupted"
    finally:
        stop(proc, signal.SIGINT, grace=20, group=True)
        said(proc.stderr.read())
        said.end()
    return proc.returncode, hang, messages


def host_notes(collector, code, hang, messages, runs=(), disks=0, failed=None):
    """Sentences about the test host itself: its errors, a hang, a crash. A failing exit code is one too unless a
    run failed (`failed`, or else any of `runs` has problems with `disks` disks)."""
    notes = [f"test host: {e}" for e in collector.errors]
    if hang:
        notes.append(f"test host: {hang}")
        notes += [m.removeprefix("mvmm-hostvm: ") for m in messages if m.startswith("mvmm-hostvm: test host CPU")]
    elif code == EXIT_FIXTURE:
        said = [m.split(": ", 1)[-1] for m in messages if m.startswith("mvmm-hostvm: ")]
        notes.append(f"test host failed (mvmm-hostvm exit {code}): {' / '.join(said) or 'no message'}")
    elif code != 0 and not (failed if failed is not None else any(r.problems(disks) for r in runs)):
        notes.append(f"mvmm-hostvm exited {code}")
    return notes
