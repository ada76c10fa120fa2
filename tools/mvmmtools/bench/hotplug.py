"""boot-bench --hotplug-cycles N: disk hot-plug as a workload for the trim policies (issue 27).

In ONE test host boot (or directly, where /dev/kvm runs standard guests), one guest per variant runs
guest-images/scripts/hotplug (eject mode: the guest powers each slot off itself once it has written and read the
disk), while tools/mvmmtools/bench/hotplug_cycles.sh adds and waits out N disks beside it: mvmm once per trim policy
(--root-ports 2, add-disk over its socket), and QEMU on the same layout (two pcie-root-ports, native PCIe hot-plug,
blockdev-add + device_add over QMP). Every add and release rebuilds the VMM's address space, freeing the old view
through RCU: the trigger the trim policies are about. Per variant: the cycle time (median, p90), heap Rss and RSS
after the warm-up and at the end (RSS whole, with the guest's RAM as the guest touches it, and beyond guest RAM: the
VMM's own), open fds, and for mvmm the trims and trim time its policy made over the cycles."""

import os
import re
import shlex
import statistics
import subprocess
import tempfile
from pathlib import Path

from mvmmtools import REPO
from mvmmtools.bench.guest_config import GUEST_CPUS, GUEST_MEMORY
from mvmmtools.bench.runner import SetupError, guest_image, quote
from mvmmtools.say import say
from mvmmtools.testhost import PEER_QEMU, direct_kvm_usable
from mvmmtools.testhost.vm import HostConfig, TestHost

CYCLES_SCRIPT = Path(__file__).resolve().parent / "hotplug_cycles.sh"
MVMM_CTL = REPO / "build" / "tools" / "mvmm-ctl"
HP_DIR = "/tmp/hotplug-bench"
PER_CYCLE_LIMIT = 60  # s a cycle may take in the test host before the run counts as hung


def guest_words(cycles):
    cmdline = f"console=ttyS0 quiet mvmm.script=hotplug mvmm.cycles={cycles}"
    return guest_image("kernel"), guest_image("guest_initrd"), cmdline


def mvmm_words(cycles, policy):
    kernel, initrd, cmdline = guest_words(cycles)
    return ["--kernel", kernel, "--initrd", initrd, "--cmdline", cmdline, "--memory", GUEST_MEMORY,
            "--cpus", str(GUEST_CPUS), "--root-ports", "2", "--trim-policy", policy,
            "--api-socket", f"/tmp/hotplug-{policy}.sock"]


def qemu_words(cycles):
    kernel, initrd, cmdline = guest_words(cycles)
    return ["-m", GUEST_MEMORY, "-smp", str(GUEST_CPUS), "-nic", "none", "-kernel", kernel, "-initrd", initrd,
            "-append", cmdline,
            # q35's default since QEMU 6.1 is ACPI hot-plug; mvmm's slots are native PCIe ones.
            "-global", "ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off",
            "-device", "pcie-root-port,id=rp0,chassis=1,bus=pcie.0,addr=0x2.0",
            "-device", "pcie-root-port,id=rp1,chassis=2,bus=pcie.0,addr=0x3.0",
            "-qmp", "unix:/tmp/hotplug-qemu.qmp,server=on,wait=off"]


def script(cycles, policies, qemu, ctl, direct):
    """The busybox sh script that runs every variant in turn."""
    limit = 120 + PER_CYCLE_LIMIT * cycles
    exec_ = "exec" if direct else "hostvm_exec"
    lines = [f"MVMM_CTL={shlex.quote(str(ctl))}", f"HP_DIR={HP_DIR}", 'mkdir -p "$HP_DIR"',
             'for d in 0 1; do dd if=/dev/zero of="$HP_DIR/d$d.img" bs=1M count=0 seek=16 2>/dev/null; done']
    runs = [(f"mvmm-{p}", f'"$MVMM" {quote(mvmm_words(cycles, p))}', "mvmm", f"/tmp/hotplug-{p}.sock")
            for p in policies]
    if qemu:
        runs.append(("qemu", f"$PEER_QEMU {quote(qemu_words(cycles))}", "qemu", "/tmp/hotplug-qemu.qmp"))
    for name, command, vmm, socket in runs:
        lines += [f'echo "HP-BENCH-BEGIN {name}"', f"MVMM_LOG=/tmp/hotplug-{name}.log",
                  f'(sleep 0; {exec_} timeout -s KILL {limit} {command}) >"$MVMM_LOG" 2>&1 & vmm=$!',
                  "sleep 1", f"HP_VMM={vmm}; HP_SOCKET={socket}; HP_CYCLES={cycles}; HP_MODE=eject",
                  CYCLES_SCRIPT.read_text(),
                  # The guest waits for the host to end the VM (guest-images/scripts/hotplug); after an
                  # HP-ERROR it waits for a disk that never comes, so the VM ends at once.
                  '[ "$i" -lt "$HP_CYCLES" ] || until grep -q "MVMM-MARK hotplug-done" "$MVMM_LOG"; do '
                  'kill -0 $vmm 2>/dev/null || break; sleep 0.1; done',
                  'if [ "$HP_VMM" = qemu ]; then qmp quit; else ctl quit; fi >/dev/null',
                  'wait $vmm; code=$?',
                  'grep -a "exit stats" "$MVMM_LOG"', f'echo "HP-BENCH-END {name} $code"']
    return "\n".join(lines) + "\n"


def run(args):
    """Runs the experiment; returns boot-bench's exit code."""
    mvmm = Path(args.mvmm).resolve()
    if not mvmm.is_file() or not MVMM_CTL.is_file():
        raise SetupError(f"build mvmm and mvmm-ctl first (tools/build): {mvmm}, {MVMM_CTL}")
    policies = args.trim_policies or ["off", "batch", "drain", "adaptive"]
    direct = direct_kvm_usable()
    text = script(args.hotplug_cycles, policies, not args.no_qemu, MVMM_CTL, direct)
    timeout = 600 + (len(policies) + 1) * (120 + PER_CYCLE_LIMIT * args.hotplug_cycles)
    say(f"hot-plug: {args.hotplug_cycles} cycles x {len(policies)} policies"
        f"{'' if args.no_qemu else ' + QEMU'} in one {'direct run' if direct else 'test host boot'}")
    stream = Stream(args.hotplug_cycles, args.out)
    with tempfile.NamedTemporaryFile("w", prefix="hotplug-bench.", suffix=".sh") as f:
        f.write(text)
        f.flush()
        if direct:
            env = dict(os.environ, MVMM=str(mvmm), PEER_QEMU=" ".join(PEER_QEMU))
            with subprocess.Popen(["sh", f.name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as p:
                for output in p.stdout:
                    stream(output)
                code = p.wait()
        else:
            host = TestHost(HostConfig(script=f.name, mvmm=mvmm, peer_qemu=not args.no_qemu,
                                       files=tuple(str(guest_image(n)) for n in ("kernel", "guest_initrd")),
                                       binaries=(str(MVMM_CTL),), cpus=args.host_cpus, timeout=timeout))
            code = host.run(stream)
            stream("".join(f"{m}\n" for m in host.messages).encode())
    stream.close()
    out = stream.text
    results = parse(out)
    table = summary(results, args.hotplug_cycles)
    print("\n" + table)
    if args.out:
        (args.out / "hotplug-summary.txt").write_text(table + "\n")
    bad = [name for name, r in results.items() if r["code"] != 0 or len(r["cycles"]) != args.hotplug_cycles]
    if bad or not results:
        say(f"failed variants: {bad or 'all'} (test host exit {code}); console in --out")
        return 1
    return 0


def parse(out):
    """{variant: {"code": int, "cycles": [{key: int}], "exit_stats": {key: value}}} from the console."""
    results = {}
    for m in re.finditer(r"HP-BENCH-BEGIN (\S+)\r?\n(.*?)HP-BENCH-END \1 (\d+)", out, re.S):
        body = m.group(2)
        rows = [{k: int(v) for k, v in (kv.split("=", 1) for kv in c.group(1).split())}
                for c in re.finditer(r"HP-CYCLE (.*)", body)]
        stats = re.search(r"exit stats: (.*)", body)
        results[m.group(1)] = {"code": int(m.group(3)), "cycles": rows,
                               "exit_stats": dict(kv.split("=", 1) for kv in stats.group(1).split()) if stats
                               else {}}
    return results


class Stream:
    """Takes the console as it comes (bytes): keeps it, writes it to --out/hotplug-console.txt as it grows, and
    prints each variant's summary line as soon as the variant ends, with a word of progress every tenth of the
    cycles, so that a long run shows its figures before it is over (and keeps them if it is stopped)."""

    def __init__(self, cycles, out_dir):
        self.cycles, self.text, self.partial_line = cycles, "", ""
        self.variant, self.cycles_seen, self.printed = "?", 0, 0
        self.console = None
        if out_dir:
            out_dir.mkdir(parents=True, exist_ok=True)
            self.console = open(out_dir / "hotplug-console.txt", "w")

    def __call__(self, chunk):
        text = chunk.decode(errors="replace")
        self.text += text
        if self.console:
            self.console.write(text)
            self.console.flush()
        *lines, self.partial_line = (self.partial_line + text).split("\n")
        for console_line in lines:
            self.follow(console_line)

    def follow(self, console_line):
        if "HP-BENCH-BEGIN " in console_line:
            self.variant, self.cycles_seen = console_line.split("HP-BENCH-BEGIN ", 1)[1].strip(), 0
        elif "HP-CYCLE " in console_line:
            self.cycles_seen += 1
            if self.cycles_seen % max(1, self.cycles // 10) == 0:
                say(f"{self.variant}: {self.cycles_seen}/{self.cycles} cycles")
        elif "HP-BENCH-END " in console_line:
            results = list(parse(self.text).items())
            if not self.printed:
                print(header(self.cycles), flush=True)
            for name, result in results[self.printed:]:
                print(line(name, result, self.cycles), flush=True)
            self.printed = len(results)

    def close(self):
        if self.console:
            self.console.close()


def warm_up(cycles):
    return max(1, cycles // 10)


def header(cycles):
    return (f"hot-plug cycles: {cycles} per variant, figures after {warm_up(cycles)} warm-up cycles\n"
            f"{'variant':16} {'done':>5} {'median ms':>9} {'p90 ms':>7} {'heap KiB':>15} {'malloc KiB':>15} "
            f"{'RSS KiB':>15} {'beyond RAM KiB':>15} "
            f"{'fds':>7} {'trims':>6} {'trim ms':>8} {'as rebuilds':>11}")


def line(name, r, cycles):
    """One variant over the cycles after a warm-up of a tenth of them."""
    rows = r["cycles"][warm_up(cycles):] or r["cycles"]
    if not rows:
        return f"{name:16} {0:>5}   (exit code {r['code']})"
    ms = sorted(x["ms"] for x in rows)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    span = lambda key: f"{rows[0][key]}->{rows[-1][key]}"
    trims = rows[-1]["trims"] - rows[0]["trims"] if rows[-1]["trims"] >= 0 else None
    trim_ms = (rows[-1]["trim_ns"] - rows[0]["trim_ns"]) / 1e6 if rows[-1]["trim_ns"] >= 0 else None
    return (f"{name:16} {len(r['cycles']):>5} {statistics.median(ms):>9.0f} {p90:>7} "
            f"{span('heap_kib'):>15} {span('malloc_kib'):>15} {span('rss_kib'):>15} {span('vmm_rss_kib'):>15} "
            f"{span('fds'):>7} "
            f"{'n/a' if trims is None else trims:>6} {'n/a' if trim_ms is None else f'{trim_ms:.1f}':>8} "
            f"{r['exit_stats'].get('as_rebuilds', 'n/a'):>11}")


def summary(results, cycles):
    return "\n".join([header(cycles)] + [line(name, r, cycles) for name, r in results.items()])
