"""Boots VMMs one after another inside ONE test host VM boot and collects what each printed: shared by
tools/boot-bench (times) and tools/boot-soak (reliability).

The test host side is tools/bench/boot_bench_runner.sh: its BOOTBENCH-* lines carry the test host's
/proc/uptime, so times are measured inside the test host, free of the console relay's delay. Where /dev/kvm
runs standard guests (hardware VMX/SVM), the same script runs directly on this machine instead."""

import collections
import hashlib
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from guest_config import (DISK_SIZE_MIB, GUEST_CMDLINE, GUEST_CPUS, GUEST_MEMORY, MAX_DISKS,  # noqa: F401
                          QEMU_FIRMWARE, Guest, Machine, mvmm_args, qemu_args)

REPO = Path(__file__).resolve().parent.parent.parent
HOSTVM = REPO / "tools" / "mvmm-hostvm"
RUNNER = REPO / "tools" / "bench" / "boot_bench_runner.sh"
DEFAULT_MVMM = REPO / "build" / "vmm" / "mvmm"
PEER_QEMU = ["qemu-system-x86_64", "-accel", "kvm", "-M", "q35", "-cpu", "host", "-nographic", "-no-reboot"]
EXIT_FIXTURE = 125  # mvmm-hostvm: the test host failed (crashed, rebooted, no /dev/kvm)
TEST_HOST_BOOT = 300  # s allowed for building the layers and booting the test host
KIB_PER_MIB = 1024
HOST_CPUS = 1  # the test host VM's CPUs, as tools/mvmm-hostvm's default (guest-images/README.md says why)
IO_WORKLOADS = ("randread", "seqread")  # what the guest's io-bench script runs, in order


class SetupError(Exception):
    """The tool cannot start (exit 2)."""


def say(msg):
    print(f"{Path(sys.argv[0]).name}: {msg}", file=sys.stderr, flush=True)


def direct_kvm_usable():
    """True where /dev/kvm runs standard guests (hardware VMX/SVM, not PVM): no test host VM is needed."""
    if Path("/sys/module/kvm_pvm").exists() or not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    return re.search(r"\b(vmx|svm)\b", Path("/proc/cpuinfo").read_text()) is not None


def guest_image(name):
    p = subprocess.run([str(REPO / "guest-images" / "build"), "--get", name], capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        raise SetupError(f"guest-images/build --get {name} failed:\n{p.stderr.strip()}")
    return p.stdout.strip()


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
    """The script for `mvmm-hostvm --script` (or sh, directly) that boots the default configuration with
    `disks` disks: runs = [(tag, limit_s, "mvmm"|"qemu", [extra arguments])] in order."""
    guest, machine = Guest(kernel, initrd), Machine(disks=disks)
    words = {"mvmm": mvmm_args(guest, machine), "qemu": qemu_args(guest, machine, qemu_firmware)}
    return host_script(tool, disks, [(tag, limit, vmm, words[vmm] + list(extra)) for tag, limit, vmm, extra in runs],
                       mvmm_env)


def host_script(tool, disks, runs, mvmm_env=(), binaries=None, hugepages=0, filled=None, memory_at=None):
    """The runner's helpers, one exec-function per VMM binary (vmm_mvmm runs $MVMM, vmm_qemu the peer QEMU,
    binaries = {name: path} adds vmm_NAME), `disks` sparse disks (filled = (MiB, mvmm-io): disks of that size
    holding its pattern), `hugepages` 2 MiB pages reserved, the memory read at the guest's line matching the awk
    regex `memory_at` (default: its poweroff marker), then runs = [(tag, limit_s, function name, [arguments])] in
    order."""
    env = quote(mvmm_env) + " " if mvmm_env else ""
    lines = [RUNNER.read_text(), f"# written by tools/{tool}",
             # exec: the background job's process is the VMM itself, whose /proc entry the runner reads.
             f'vmm_mvmm() {{ {env}exec "$MVMM" "$@"; }}',
             'vmm_qemu() { exec $PEER_QEMU "$@"; }']
    lines += [f'vmm_{name}() {{ {env}exec {shlex.quote(str(path))} "$@"; }}' for name, path in (binaries or {}).items()]
    lines += [f"BB_MEM_AT={shlex.quote(memory_at)}"] if memory_at else []
    lines.append(f"bb_disks {disks} {quote([str(w) for w in filled or (DISK_SIZE_MIB,)])} || exit 1")
    if hugepages:
        lines.append(f"bb_hugepages {hugepages} || exit 1")
    for tag, limit, function, words in runs:
        lines.append(f"bb_run {tag} {limit:g} vmm_{function} {quote(words)}".rstrip())
    return "\n".join(lines) + "\n"


# --- one run's figures ------------------------------------------------------------------------------------------

@dataclass
class Run:
    tag: str
    phase: str  # "w" warm-up, "r" measured
    rep: int
    variant: str
    begin: float = None  # test host uptime at exec
    end: float = None  # at exit
    code: int = None
    hung: bool = False
    lines: list = field(default_factory=list)  # [(uptime, text)] of the lines that matter
    # hwm_kib, guest_kib, mapping_kib, heap_rss_kib, heap_size_kib (from /proc at the poweroff or io-done marker)
    memory: dict = field(default_factory=dict)
    exit_stats: dict = field(default_factory=dict)
    report: dict = None  # mvmm's --report document
    tail: list = field(default_factory=list)  # a hung VMM's threads, a failed run's last output lines

    def since_exec(self, pattern, last=False):
        hits = [t for t, text in self.lines if re.search(pattern, text)]
        return None if not hits else round((hits[-1] if last else hits[0]) - self.begin, 3)

    def guest_clock_start(self):
        """When the guest's uptime clock read 0, in s from exec: the init marker's stamp minus the uptime it
        prints. Splits the time before the guest kernel's clock starts (VMM set-up, firmware, decompression)
        from the kernel's own boot; it mixes two clocks, so it is an estimate."""
        for t, text in self.lines:
            m = re.search(r"MVMM-MARK init ([\d.]+)", text)
            if m:
                return round(t - float(m.group(1)) - self.begin, 3)
        return None

    def disks_seen(self):
        return sum(1 for _, text in self.lines if "MVMM-MARK disk " in text)

    def io_results(self):
        """{workload: {key: value}} from the guest's `MVMM-MARK io` lines (guest-images/scripts/io-bench)."""
        found = {}
        for _, text in self.lines:
            m = re.search(r"MVMM-MARK io \S+ (.*)", text)
            if m:
                values = key_values(m.group(1))
                found[values.get("workload")] = values
        return found

    def figures(self, disks):
        """{metric: value or None}: the times in s from exec, the memory in KiB, the guest's I/O rates."""
        io = self.io_results()
        marker = lambda name: rf"MVMM-MARK {name} "
        hwm, guest = self.memory.get("hwm_kib"), self.memory.get("guest_kib")
        return {
            "first_kvm_run_s": self.since_exec(r"first KVM_RUN"),
            "guest_clock_start_s": self.guest_clock_start(),
            "init_s": self.since_exec(marker("init")),
            "all_disks_s": self.since_exec(marker("disk") if disks else marker("cpus"), last=True),
            "exit_s": None if self.end is None else round(self.end - self.begin, 3),
            "peak_rss_kib": hwm,
            "guest_ram_rss_kib": guest,
            "beyond_guest_kib": hwm - guest if hwm is not None and guest is not None else None,
            "heap_rss_kib": self.memory.get("heap_rss_kib"),
            "heap_size_kib": self.memory.get("heap_size_kib"),
            **{f"stats_{k}": v for k, v in self.exit_stats.items()},
            **{f"{w}_{k}": io.get(w, {}).get(k) for w in IO_WORKLOADS for k in ("iops", "mib_s")},
        }

    def problems(self, disks, markers=True, io=False):
        """What went wrong; markers=False: a guest that prints no MVMM-MARK lines (only its exit counts); io: the
        guest must report every workload of IO_WORKLOADS, with reads done, none failed and all data matching."""
        found = []
        if self.hung:
            found.append("hung (killed at its time limit)")
        elif self.code is None:
            found.append("not started (the test host ended before)" if self.begin is None else
                         "did not finish: the test host hung or ended during this run")
        elif self.code != 0:
            found.append(f"exit code {self.code}")
        if not markers:
            return found
        if self.code is not None and self.disks_seen() != disks:
            found.append(f"guest saw {self.disks_seen()} of {disks} disks")
        if self.code is not None and self.since_exec(r"MVMM-MARK init ") is None:
            found.append("no init marker")
        return found + (self.io_problems() if io and self.code is not None else [])

    def io_problems(self):
        found, results = [], self.io_results()
        for w in IO_WORKLOADS:
            r = results.get(w)
            if r is None:
                found.append(f"no {w} result")
            elif r.get("failed") or r.get("errors") or r.get("mismatches") or not (r.get("iops") or 0) > 0:
                found.append(f"{w}: iops={r.get('iops')} errors={r.get('errors')} mismatches={r.get('mismatches')}")
        if not self.memory.get("guest_kib"):
            found.append("no guest RAM in the memory read at io-done (the VMM was gone or exiting)")
        return found


def key_values(text):
    values = {}
    for word in text.split():
        k, sep, v = word.partition("=")
        if sep:
            values[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v) if re.fullmatch(r"-?\d+\.\d*", v) \
                else None if v == "n/a" else v
    return values


class Collector:
    """Turns the runner's BOOTBENCH-* lines into Runs; calls on_end(run) when a run ends."""

    def __init__(self, runs, on_end=None):
        self.runs = {r.tag: r for r in runs}
        self.order = [r.tag for r in runs]
        self.on_end = on_end or (lambda run: None)
        self.last_progress = time.monotonic()  # the latest BOOTBENCH line
        self.errors = []
        self.console = collections.deque(maxlen=40)  # the test host's other lines (its kernel, its shell)

    def line(self, text):
        m = re.search(r"BOOTBENCH-(BEGIN|LINE|MEM|END|THREAD|TAIL|ERROR|REPORT) (.*)", text.rstrip("\r"))
        if not m:
            self.console.append(text.rstrip("\r"))
            return
        kind, rest = m.groups()
        self.last_progress = time.monotonic()
        if kind == "ERROR":
            self.errors.append(rest)
            say(f"test host: {rest}")
            return
        tag, _, rest = rest.partition(" ")
        run = self.runs.get(tag)
        if run is None:
            return
        if kind == "BEGIN":
            run.begin = float(rest)
        elif kind == "LINE":
            at, _, what = rest.partition(" ")
            run.lines.append((float(at), what))
            stats = re.search(r"exit stats:(.*)", what)
            if stats:
                run.exit_stats = key_values(stats.group(1))
        elif kind == "MEM":
            run.memory = key_values(rest)
        elif kind == "REPORT":
            try:
                run.report = json.loads(rest)
            except ValueError as e:
                run.tail.append(f"unreadable --report document ({e})")
        elif kind in ("THREAD", "TAIL"):  # a hung VMM's threads before END, a failed run's output after it
            run.tail.append(rest if kind == "TAIL" else f"thread {rest}")
            say(f"  {run.tag}> {run.tail[-1]}")
        else:
            at, code, hung = rest.split()
            run.end, run.code, run.hung = float(at), int(code), hung == "1"
            self.on_end(run)

    def ordered(self):
        return [self.runs[t] for t in self.order]


# --- running the test host --------------------------------------------------------------------------------------

@dataclass
class HostOptions:
    mvmm: Path = None  # None: QEMU only
    qemu: bool = False  # the peer QEMU is needed
    files: tuple = ()  # copied into the test host
    binaries: tuple = ()  # programs copied with their shared libraries (a second mvmm build)
    disk_images: tuple = ()  # raw images that become the test host's /dev/vda, /dev/vdb, ... in order
    run_timeout: float = 300  # one run's limit (the runner enforces it)
    host_cpus: int = HOST_CPUS
    host_append: str = ""
    verbose: bool = False  # the test host's kernel messages too


def stop_process(proc):
    """Interrupts mvmm-hostvm (it then stops its QEMU); kills its process group if it does not end."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def start(options, script, runs):
    """Starts the script in a test host VM, or with sh directly where /dev/kvm runs standard guests."""
    if direct_kvm_usable():
        env = dict(os.environ, PEER_QEMU=" ".join(PEER_QEMU))
        if options.mvmm:
            env["MVMM"] = str(options.mvmm)
        cmd = ["sh", script]
    else:
        env = None
        outer_timeout = TEST_HOST_BOOT + runs * (options.run_timeout + 10)
        cmd = [str(HOSTVM), "--timeout", f"{outer_timeout:g}", "--script", script,
               "--host-cpus", str(options.host_cpus)]
        cmd += ["--host-append", options.host_append] if options.host_append else []
        cmd += ["--mvmm", str(options.mvmm)] if options.mvmm else []
        cmd += [w for f in options.files for w in ("--file", f)]
        cmd += [w for f in options.binaries for w in ("--binary", str(f))]
        cmd += [w for f in options.disk_images for w in ("--disk-image", str(f))]
        cmd += ["--peer-qemu"] if options.qemu else []
        cmd += ["--verbose"] if options.verbose else []
        cmd += ["--"]
    # Its own process group: a hang is ended without touching others.
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)


def run_script(options, script, collector, runs):
    """Runs the script: its stdout goes to the collector, mvmm-hostvm's own messages (stderr) through to ours.
    Returns (exit code, a sentence when the test host hung or None, its messages)."""
    proc = start(options, script, runs)
    # No run goes that long without a runner line unless the test host itself is stuck (it may still print:
    # a test host whose CPUs are locked up prints its watchdog's soft lockup reports, and nothing else).
    silence = options.run_timeout + 120
    messages = []

    def message(text):
        print(text, file=sys.stderr, flush=True)
        messages.append(text)

    sinks = {proc.stdout.fileno(): collector.line, proc.stderr.fileno(): message}
    pending = dict.fromkeys(sinks, b"")
    last, hang = time.monotonic(), None
    try:
        while sinks:
            ready, _, _ = select.select(list(sinks), [], [], 1.0)
            if not ready and time.monotonic() - last > silence:
                hang = f"the test host printed nothing for {silence:g} s; stopped it"
                break
            if time.monotonic() - collector.last_progress > silence:
                hang = f"no run started, ended or printed a marker for {silence:g} s; stopped the test host"
                break
            for fd in ready:
                data = os.read(fd, 65536)
                last = time.monotonic()
                if not data:
                    sink, rest = sinks.pop(fd), pending.pop(fd)
                    if rest:
                        sink(rest.decode(errors="replace"))
                    continue
                *lines, pending[fd] = (pending[fd] + data).split(b"\n")
                for line in lines:
                    sinks[fd](line.decode(errors="replace"))
    except KeyboardInterrupt:
        hang = "interrupted"
    finally:
        stop_process(proc)
        # What mvmm-hostvm said while stopping a stuck test host: where its CPUs were.
        for line in proc.stderr.read().decode(errors="replace").splitlines():
            message(line)
    if proc.returncode == 124 and hang is None:
        hang = "mvmm-hostvm reported a hang (nothing ended within its time limit)"
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
