"""Boot soak: boots one guest configuration many times and classifies every boot; a reliability test, not a
benchmark.

  tools/boot-soak [--boots 20] [--disks 64] [--vmm mvmm|qemu] [--trim-policies P,P,...] [--mvmm PATH]
                  [--mvmm-arg ARG]... [--mvmm-env NAME=VALUE]... [--qemu-firmware qboot|seabios]
                  [--host-cpus 1] [--host-append ARGS] [--boots-per-host 10] [--run-timeout SEC]
                  [--json FILE] [--max-incidents N]

Every boot is the default guest (512M, 2 CPUs, `mvmm.script=markers`) with --disks sparse raw disks, each behind
its own PCIe root port, and ends in one of these classes:
  ok            exit 0, the poweroff marker, every disk seen, no crash or stall text on the console
  guest-crash   mvmm's exit 4 (triple fault or an unrunnable state; its register dump is in the report), a
                guest kernel panic/oops/BUG, or a guest that ended without powering off (QEMU's -no-reboot
                turns a guest reset into an exit)
  guest-stall   RCU stall, soft/hard lockup or hung-task text on the guest console (even if it then finished)
  vmm-hang      the run was still going at --run-timeout, silent for the last 60 s: its threads' states and
                kernel stacks, then killed
  timeout       the run was still going at --run-timeout but still printing: too slow (a loaded machine)
  vmm-error     another exit code (1 internal error, 2 bad set-up, 3 reset), or disks missing
  host-died     the test host VM hung, crashed or rebooted during the boot (the boot never ended)
With --trim-policies the boots cycle through the policies (mvmm's --trim-policy), so a table row per policy.

How: the boots run in test host boots of --boots-per-host each (a test host VM as tools/mvmm-hostvm --script
boots it, the runner of tools/mvmmtools/bench/boot_bench_runner.sh in it); when a test host dies, the boots it
did not start run in a new one, so --boots boots are attempted in all. Where /dev/kvm runs standard guests
(VMX/SVM), they run directly instead. The test host's CPU count and kernel parameters are options because the
test host itself is a suspect (guest-images/README.md has the evidence). Exit code: 0 every boot ok, 1 some
incident, 2 bad arguments.
"""

import argparse
import collections
import json
import os
import re
import signal
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from mvmmtools.bench.guest_config import GUEST_CMDLINE, GUEST_CPUS, GUEST_MEMORY, MAX_DISKS, QEMU_FIRMWARE
from mvmmtools.bench.runner import (SetupError, binary_id, guest_image, host_notes, resolved_mvmm, run_script,
                                    runner_script)
from mvmmtools.bench.runs import Collector, Run
from mvmmtools.say import say
from mvmmtools.testhost import DEFAULT_MVMM, HOST_CPUS, direct_kvm_usable
from mvmmtools.testhost.vm import HostConfig

TRIM_POLICIES = ("off", "batch", "drain", "adaptive")
CLASSES = ("ok", "guest-crash", "guest-stall", "vmm-hang", "timeout", "vmm-error", "host-died")
QUIET_BEFORE_HANG = 60  # s without output before the limit: a hang, not a slow boot
# What a VMM prints when the runner stops it at the limit: no sign of progress.
STOPPED_TEXT = re.compile(r"(SIGTERM|SIGINT): shutting down|terminating on signal|exit stats:")
EXIT_GUEST_CRASH = 4
CRASH_TEXT = re.compile(r"Kernel panic|BUG:|Oops|general protection fault|triple.fault")
STALL_TEXT = re.compile(r"rcu: .*[Ss]tall|self-detected stall|detected stalls|timer wakeup didn't happen|"
                        r"soft lockup|hard LOCKUP|blocked for more than")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="boot-soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--boots", type=int, default=20, help="boots in all (default 20)")
    ap.add_argument("--disks", type=int, default=64, help="sparse raw disks behind root ports (default 64)")
    ap.add_argument("--vmm", choices=("mvmm", "qemu"), default="mvmm", help="the VMM inside (default mvmm)")
    ap.add_argument("--trim-policies", metavar="P,P,...", help=f"cycle mvmm through {','.join(TRIM_POLICIES)}")
    ap.add_argument("--mvmm", type=Path, default=DEFAULT_MVMM, help=f"the mvmm binary (default {DEFAULT_MVMM})")
    ap.add_argument("--mvmm-arg", action="append", default=[], metavar="ARG",
                    help="an extra mvmm argument (e.g. --mvmm-arg=--io-threads --mvmm-arg=1); repeatable")
    ap.add_argument("--mvmm-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for mvmm (e.g. MVMM_RCU_MEMBARRIER=0); repeatable")
    ap.add_argument("--qemu-firmware", choices=sorted(QEMU_FIRMWARE), default="qboot",
                    help="QEMU's firmware (default qboot: SeaBIOS spends ~90 s scanning 64 disks before the "
                         "kernel starts, and the soak is about the guest kernel's boot)")
    ap.add_argument("--host-cpus", type=int, default=HOST_CPUS, metavar="N",
                    help=f"the test host's CPUs (default {HOST_CPUS})")
    ap.add_argument("--host-append", default="", metavar="ARGS", help="extra test host kernel parameters")
    ap.add_argument("--host-verbose", action="store_true", help="the test host's kernel messages too")
    ap.add_argument("--boots-per-host", type=int, default=10, metavar="N",
                    help="boots per test host boot (default 10)")
    ap.add_argument("--run-timeout", type=float, metavar="SEC",
                    help="limit of one boot (default 120 + 4 s per disk; a 64-disk boot takes 30-150 s here, "
                         "depending on the machine's load)")
    ap.add_argument("--max-incidents", type=int, metavar="N", help="stop after N incidents")
    ap.add_argument("--json", type=Path, metavar="FILE", help="write every boot and the table as JSON to FILE")
    args = ap.parse_args(argv)
    if args.boots < 1 or args.boots_per_host < 1:
        ap.error("--boots and --boots-per-host must be at least 1")
    if not 0 <= args.disks <= MAX_DISKS:
        ap.error(f"--disks must be between 0 and {MAX_DISKS}")
    if args.host_cpus < 1:
        ap.error("--host-cpus must be at least 1")
    if args.run_timeout is None:
        args.run_timeout = 120 + 4 * args.disks
    args.policies = [None]
    if args.trim_policies:
        if args.vmm != "mvmm":
            ap.error("--trim-policies is for --vmm mvmm")
        args.policies = [p.strip() for p in args.trim_policies.split(",") if p.strip()]
        if not args.policies or any(p not in TRIM_POLICIES for p in args.policies):
            ap.error(f"--trim-policies takes names from {','.join(TRIM_POLICIES)}")
    if any("=" not in e for e in args.mvmm_env):
        ap.error("--mvmm-env takes NAME=VALUE")
    if args.vmm == "qemu" and (args.mvmm_arg or args.mvmm_env):
        ap.error("--mvmm-arg and --mvmm-env are for --vmm mvmm")
    return args


def classify(run, disks):
    """(class, a short reason) of one boot."""
    text = [t for _, t in run.lines] + run.tail
    crash = next((t for t in text if CRASH_TEXT.search(t)), None)
    stall = next((t for t in text if STALL_TEXT.search(t)), None)
    if run.hung:
        quiet = run.end - max([run.begin] + [t for t, text in run.lines if not STOPPED_TEXT.search(text)])
        if quiet < QUIET_BEFORE_HANG:
            limit = run.end - run.begin
            return "timeout", f"still booting at the {limit:.0f} s limit, last output {quiet:.0f} s before"
        return "vmm-hang", f"no output for the last {quiet:.0f} s of its {run.end - run.begin:.0f} s"
    if run.code is None:
        seen = f"; the console showed: {crash or stall}" if crash or stall else ""
        return "host-died", "the test host hung or died during this boot" + seen
    if run.code == EXIT_GUEST_CRASH or crash:
        return "guest-crash", crash or f"exit {run.code}"
    if stall:
        return "guest-stall", stall
    if run.code != 0:
        return "vmm-error", f"exit {run.code}"
    if run.since_exec(r"MVMM-MARK poweroff ") is None:
        return "guest-crash", "the guest ended without its poweroff marker (a reset or crash)"
    if run.disks_seen() != disks:
        return "vmm-error", f"the guest saw {run.disks_seen()} of {disks} disks"
    return "ok", ""


class Soak:
    def __init__(self, args):
        self.args = args
        self.boots = []  # [{"boot", "variant", "host_boot", "class", "reason", "run"}]
        self.host_problems = []
        self.started = time.monotonic()

    def variant(self, boot):
        policy = self.args.policies[boot % len(self.args.policies)]
        name = self.args.vmm if policy is None else f"mvmm-{policy}"
        extra = list(self.args.mvmm_arg) + (["--trim-policy", policy] if policy else [])
        return name, extra

    def incidents(self):
        return sum(1 for b in self.boots if b["class"] != "ok")

    def done(self):
        limit = self.args.max_incidents
        return len(self.boots) >= self.args.boots or (limit is not None and self.incidents() >= limit)

    def host_boot(self, number):
        """Runs the next boots in one test host boot; boots it never started are left for the next one."""
        args, first = self.args, len(self.boots)
        count = min(args.boots_per_host, args.boots - first)
        runs, plan = [], []
        for i in range(first, first + count):
            name, extra = self.variant(i)
            run = Run(f"b{i + 1}.{name}", "r", i + 1, name)
            runs.append(run)
            plan.append((run.tag, args.run_timeout, args.vmm, extra))
        collector = Collector(runs, lambda run: self.ended(run, number))
        config = HostConfig(mvmm=args.mvmm if args.vmm == "mvmm" else None, peer_qemu=args.vmm == "qemu",
                            files=(args.kernel, args.initrd), cpus=args.host_cpus, append=args.host_append,
                            verbose=args.host_verbose)
        with tempfile.NamedTemporaryFile("w", prefix="boot-soak.", suffix=".sh") as script:
            script.write(runner_script("boot-soak", args.disks, args.kernel, args.initrd, plan,
                                       args.qemu_firmware, args.mvmm_env))
            script.flush()
            code, hang, messages = run_script(config, script.name, collector, len(plan), args.run_timeout)
        for run in runs:  # a boot that began but never ended: the test host died under it
            if run.begin is not None and run.end is None:
                self.ended(run, number)
        notes = host_notes(collector, code, hang, messages, runs, args.disks)
        if notes:
            tail = list(collector.console)[-15:]
            self.host_problems.append({"host_boot": number, "notes": notes, "console_tail": tail})
            for n in notes:
                say(f"host boot {number}: {n}")
        if len(self.boots) == first:
            raise SetupError(f"test host boot {number} ran no boot at all: " + "; ".join(notes or messages[-3:]))

    def ended(self, run, host_boot):
        if self.done():
            return
        kind, reason = classify(run, self.args.disks)
        self.boots.append({"boot": len(self.boots) + 1, "variant": run.variant, "host_boot": host_boot,
                           "class": kind, "reason": reason, "exit_s": run.figures(self.args.disks)["exit_s"],
                           "run": asdict(run)})
        say(f"[{len(self.boots)}/{self.args.boots}] {run.variant} (host boot {host_boot}): {kind}"
            + (f" - {reason}" if reason else "") + (f", {run.end - run.begin:.1f} s" if run.end else ""))
        if kind != "ok":
            for line in (run.tail or [t for _, t in run.lines])[-25:]:
                say(f"    | {line}")

    def run(self):
        number = 0
        while not self.done():
            number += 1
            self.host_boot(number)

    def table(self):
        rows = collections.OrderedDict()
        for b in self.boots:
            rows.setdefault(b["variant"], collections.Counter())[b["class"]] += 1
        return {name: {"boots": sum(c.values()), **{k: c[k] for k in CLASSES}} for name, c in rows.items()}

    def document(self):
        args = self.args
        config = {"boots": args.boots, "disks": args.disks, "vmm": args.vmm, "policies": args.policies,
                  "mvmm": args.mvmm_id, "mvmm_args": args.mvmm_arg, "mvmm_env": args.mvmm_env,
                  "qemu_firmware": args.qemu_firmware if args.vmm == "qemu" else None,
                  "where": "directly" if direct_kvm_usable() else
                  f"test host VM, {args.host_cpus} CPU(s), {args.boots_per_host} boots per test host boot"
                  + (f", kernel parameters '{args.host_append}'" if args.host_append else ""),
                  "memory": GUEST_MEMORY, "cpus": GUEST_CPUS, "cmdline": GUEST_CMDLINE,
                  "run_timeout_s": args.run_timeout, "wall_s": round(time.monotonic() - self.started),
                  "load_average": f"{os.getloadavg()[0]:.1f} at the end"}
        return {"config": config, "table": self.table(), "host_problems": self.host_problems, "boots": self.boots}


def report(doc):
    config, table = doc["config"], doc["table"]
    out = [f"boot-soak: {config['disks']} disks, {config['vmm']}"
           + (f" ({config['qemu_firmware']})" if config["qemu_firmware"] else "")
           + f", {config['where']}; {config['wall_s']} s"]
    header = ["variant", "boots", *CLASSES, "incident rate"]
    rows = [[name, str(c["boots"]), *[str(c[k]) for k in CLASSES],
             f"{(c['boots'] - c['ok']) / c['boots']:.0%}"] for name, c in table.items()]
    if len(rows) > 1:
        total = {k: sum(c[k] for c in table.values()) for k in ("boots", *CLASSES)}
        rows.append(["all", str(total["boots"]), *[str(total[k]) for k in CLASSES],
                     f"{(total['boots'] - total['ok']) / total['boots']:.0%}"])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    incidents = [b for b in doc["boots"] if b["class"] != "ok"]
    if incidents:
        out += ["", "incidents:"] + [f"  boot {b['boot']} ({b['variant']}, host boot {b['host_boot']}): "
                                     f"{b['class']} - {b['reason']}" for b in incidents]
    for p in doc["host_problems"]:
        out += [f"test host boot {p['host_boot']}: {'; '.join(p['notes'])}"]
        out += [f"  | {line}" for line in p["console_tail"]]
    return "\n".join(out)


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a killed soak stops its test host too
    args = parse_args(argv)
    try:
        args.mvmm = resolved_mvmm(args.mvmm) if args.vmm == "mvmm" else args.mvmm
        args.mvmm_id = binary_id(args.mvmm) if args.vmm == "mvmm" else None
        args.kernel, args.initrd = guest_image("kernel"), guest_image("guest_initrd")
        soak = Soak(args)
        try:
            soak.run()
        except KeyboardInterrupt:
            say("interrupted; the boots so far:")
        doc = soak.document()
    except SetupError as e:
        say(str(e))
        return 2
    print(report(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if doc["boots"] and all(b["class"] == "ok" for b in doc["boots"]) else 1

