"""One boot of a benchmark as the test host side (boot_bench_runner.sh) reports it: the runner's BOOTBENCH-* lines
turned into Runs (Collector), each with its times, memory, exit stats, mvmm's --report and the guest's I/O
results."""

import collections
import json
import re
import time
from dataclasses import dataclass, field

from mvmmtools.say import say

IO_WORKLOADS = ("randread", "seqread")  # what the guest's io-bench script runs, in order
# What the guest kernel counted during a workload, over the disks it read (io-bench): the block devices' completed
# reads and read merges, and the interrupts of their virtio devices' request queues.
IO_COUNTERS = ("dev_ios", "dev_merges", "irqs")
# The VMM's host CPU time per read of a workload (from the runner's BOOTBENCH-CPU snapshots at the guest's io-start
# and io markers), in all and by its threads' names: the guest's vCPUs (mvmm's vcpuN, QEMU's "CPU N/KVM"), io_uring's
# workers (the kernel's iou-wrk-N, counted as the VMM's threads), the VMM's other threads (its I/O threads, thread
# pool and the rest), and threads that ended meanwhile (the whole process's time less its threads'). Clock ticks
# are USER_HZ, 100 a second on Linux.
CPU_CLASSES = (("vcpu", re.compile(r"vcpu\d+|CPU_\d+/KVM")), ("iowq", re.compile(r"iou-wrk-\d+")),
               ("vmm", re.compile(r".*")))
CPU_FIGURES = ("cpu",) + tuple(name for name, _ in CPU_CLASSES) + ("ended",)
CPU_US_PER_TICK = 10_000


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
    # hwm_kib, guest_kib, mapping_kib, heap_rss_kib, heap_size_kib, arena_rss_kib, arena_size_kib, arenas (from
    # /proc at the poweroff or io-done marker)
    memory: dict = field(default_factory=dict)
    exit_stats: dict = field(default_factory=dict)
    report: dict = None  # mvmm's --report document
    tail: list = field(default_factory=list)  # a hung VMM's threads, a failed run's last output lines
    # [(marker, ticks, {tid: (name, ticks)})] at the guest's io-start and io markers, in order
    cpu: list = field(default_factory=list)
    profile: list = field(default_factory=list)  # boot-bench --perf: the lines of its perf report

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
            "io_done_s": self.since_exec(marker("io-done")),
            "peak_rss_kib": hwm,
            "guest_ram_rss_kib": guest,
            "guest_thp_kib": self.memory.get("guest_thp_kib"),
            "beyond_guest_kib": hwm - guest if hwm is not None and guest is not None else None,
            "heap_rss_kib": self.memory.get("heap_rss_kib"),
            "heap_size_kib": self.memory.get("heap_size_kib"),
            "arena_rss_kib": self.memory.get("arena_rss_kib"),
            # All of glibc's heap: the main arena ([heap]) and the arenas of the threads that malloc.
            "malloc_rss_kib": _plus(self.memory.get("heap_rss_kib"), self.memory.get("arena_rss_kib")),
            **{f"stats_{k}": v for k, v in self.exit_stats.items()},
            **{f"{w}_{k}": io.get(w, {}).get(k) for w in IO_WORKLOADS for k in ("iops", "mib_s")},
            **{f"{w}_{k}_per_io": _per_io(io.get(w, {}), k) for w in IO_WORKLOADS for k in IO_COUNTERS},
            **self.cpu_figures(io),
        }

    def cpu_figures(self, io):
        """{workload}_cpu_us_per_io and, per thread class, {workload}_{class}_us_per_io: the CPU time the VMM's
        threads used between the snapshot before the workload and the one at its io marker, per read it made.
        None without snapshots (not --io, or a run recorded before they were taken)."""
        figures = {}
        starts = [i for i, (marker, _, _) in enumerate(self.cpu) if marker == "io-start"]
        series = self.cpu[starts[-1]:] if starts else []
        for n, w in enumerate(IO_WORKLOADS):
            ios = io.get(w, {}).get("ios")
            used = _cpu_used(series[n], series[n + 1]) if len(series) > n + 1 else None
            usable = used is not None and isinstance(ios, int) and ios > 0
            for name in CPU_FIGURES:
                figures[f"{w}_{name}_us_per_io"] = round(used[name] * CPU_US_PER_TICK / ios, 1) if usable else None
        return figures

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


def _per_io(result, key):
    """A workload's counter per read it made; None when the guest did not print it (io-bench before issue 26)."""
    count, ios = result.get(key), result.get("ios")
    return round(count / ios, 4) if isinstance(count, int) and isinstance(ios, int) and ios > 0 else None


def _cpu_used(before, after):
    """Ticks between two snapshots, in all (cpu), per thread class and in threads that ended (the rest); a thread
    that started in between counts from 0."""
    used = {name: 0 for name in CPU_FIGURES}
    used["cpu"] = after[1] - before[1]
    for tid, (name, ticks) in after[2].items():
        since = max(ticks - before[2].get(tid, (name, 0))[1], 0)
        used[next(c for c, pattern in CPU_CLASSES if pattern.fullmatch(name))] += since
    used["ended"] = max(used["cpu"] - sum(used[name] for name, _ in CPU_CLASSES), 0)
    return used


def cpu_snapshot(text):
    """(marker, ticks, {tid: (name, ticks)}) from a BOOTBENCH-CPU line after its tag and uptime."""
    marker, total, *threads = text.split()
    snapshot = {}
    for word in threads:
        tid, name, ticks = word.split(":")
        snapshot[int(tid)] = (name, int(ticks))
    return marker, int(total.partition("=")[2]), snapshot


def _plus(a, b):
    return a + b if a is not None and b is not None else None


def key_values(text):
    values = {}
    for word in text.split():
        k, sep, v = word.partition("=")
        if sep:
            values[k] = int(v) if re.fullmatch(r"-?\d+", v) else float(v) if re.fullmatch(r"-?\d+\.\d*", v) \
                else None if v == "n/a" else v
    return values


RUNNER_LINE = re.compile(r"BOOTBENCH-(BEGIN|LINE|MEM|END|THREAD|TAIL|ERROR|REPORT|HOSTIO|CPU|PERF) (.*)")


class Collector:
    """Turns the runner's BOOTBENCH-* lines into Runs; calls on_end(run) when a run ends."""

    def __init__(self, runs, on_end=None):
        self.runs = {r.tag: r for r in runs}
        self.order = [r.tag for r in runs]
        self.on_end = on_end or (lambda run: None)
        self.last_progress = time.monotonic()  # the latest BOOTBENCH line
        self.errors = []
        self.console = collections.deque(maxlen=40)  # the test host's other lines (its kernel, its shell)
        self.host_io = []  # bb_host_io's figures: {key: value} per workload

    def line(self, text):
        m = RUNNER_LINE.search(text.rstrip("\r"))
        if not m:
            self.console.append(text.rstrip("\r"))
            return
        kind, rest = m.groups()
        self.last_progress = time.monotonic()
        if kind == "ERROR":
            self.errors.append(rest)
            say(f"test host: {rest}")
            return
        if kind == "HOSTIO":
            self.host_io.append(key_values(rest))
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
        elif kind == "CPU":
            run.cpu.append(cpu_snapshot(rest.partition(" ")[2]))
        elif kind == "PERF":
            run.profile.append(rest)
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
