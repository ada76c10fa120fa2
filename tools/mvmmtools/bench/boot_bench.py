"""tools/boot-bench (its --help: boot_bench_options.py): the matrix of boots in test host boots, their records, the
summary, ratios and gate, and the outputs."""

import functools
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from mvmmtools.bench import hotplug, plots, results, tables
from mvmmtools.bench.boot_bench_options import parse_args
from mvmmtools.bench.guest_config import DISK_SIZE_MIB, Guest, Machine, Variant, mvmm_args, qemu_args, varying_axes
from mvmmtools.bench.runner import (SetupError, binary_id, guest_image, host_notes, host_script, resolved_mvmm,
                                    run_script)
from mvmmtools.bench.runs import Collector, Run
from mvmmtools.bench.schedule import schedule
from mvmmtools.say import say
from mvmmtools.testhost import direct_kvm_usable, disk_device
from mvmmtools.testhost.vm import HostConfig

IO_CMDLINE = "console=ttyS0 quiet mvmm.script=io-bench mvmm.io_seconds={}"
IO_DONE = "MVMM-MARK io-done"  # the io-bench script's marker after the workloads: memory is read there
EXIT_UNDECIDED = 125  # with --threshold: git bisect run's "skip"


def matrix(args):
    """[Machine]: every combination of the matrix axes."""
    combos = itertools.product(args.disks, args.disk_bus, args.disk_kind, args.memory, args.hugepages,
                               args.prealloc, args.cpus, args.disk_format)
    return [Machine(d, b, k, mem, None if hp == "none" else hp, pre, c, c if args.io else None, fmt,
                    args.l2_cache_size if fmt == "qcow2" else None, args.disk_delay_ms)
            for d, b, k, mem, hp, pre, c, fmt in combos]


def builds(args):
    """{build name: binary}: {"mvmm": A} or {"mvmm-a": A, "mvmm-b": B}."""
    if args.mvmm_a:
        return {"mvmm-a": resolved_mvmm(args.mvmm_a), "mvmm-b": resolved_mvmm(args.mvmm_b)}
    return {"mvmm": resolved_mvmm(args.mvmm)}


def variants(args):
    found = []
    for build, alloc, cache, aio, policy in itertools.product(builds(args), args.request_allocs, args.cache_allocs,
                                                              args.aios, args.trim_policies):
        name = "-".join(w for w in (build, alloc, cache, aio, policy) if w)
        found.append(Variant(name, "mvmm", build.split("-")[-1] if build != "mvmm" else None, policy, alloc, cache,
                             aio))
    if args.no_qemu:
        return found
    # QEMU with its default (aio=threads in Debian's 7.2), and with io_uring when mvmm's io_uring boots.
    return found + [Variant("qemu", "qemu")] + \
        ([Variant("qemu-io_uring", "qemu", aio="io_uring")] if "io_uring" in args.aios else [])


def qemu_img_binary():
    """qemu-img, which makes the qcow2 base and overlays in the test host (Debian's qemu-utils)."""
    found = shutil.which("qemu-img")
    if not found:
        raise SetupError("--disk-format qcow2 needs qemu-img (apt-get install qemu-utils)")
    return found


def vmm_words(guest, machine, variant, qemu_firmware="seabios", report=None):
    """The arguments of one boot: QEMU's, or mvmm's with the variant's modes (and --report to that file)."""
    if variant.vmm == "qemu":
        return qemu_args(guest, machine, qemu_firmware, aio=variant.aio)
    modes = (("--trim-policy", variant.policy), ("--request-alloc", variant.alloc),
             ("--cache-alloc", variant.cache_alloc), ("--report", report))
    return mvmm_args(guest, machine, aio=variant.aio) + [w for option, value in modes if value
                                                          for w in (option, value)]


def perf_binary():
    """perf, which profiles each run in the test host (Debian's linux-perf; tools/setup installs it)."""
    found = shutil.which("perf")
    if not found:
        raise SetupError("--perf needs perf (apt-get install linux-perf)")
    return found


def dmsetup_binary():
    """dmsetup, which puts the disks behind dm-delay in the test host (Debian's dmsetup); refused where the runs
    would make devices on this machine itself."""
    found = shutil.which("dmsetup") or shutil.which("dmsetup", path="/usr/sbin:/sbin")
    if direct_kvm_usable():
        raise SetupError("--disk-delay-ms runs in the test host VM only (here it would make devices on this machine)")
    if not found:
        raise SetupError("--disk-delay-ms needs dmsetup (apt-get install dmsetup)")
    return found


def supports_report(binary):
    """Whether this mvmm build has --report (older builds, e.g. in a bisect, do not)."""
    p = subprocess.run([str(binary), "--help"], capture_output=True, text=True)
    return "--report" in p.stdout


def image_paths(images):
    """Where the user's disk images appear to the VMMs: /dev/vdX in the test host, themselves directly."""
    if direct_kvm_usable():
        return tuple(str(Path(i).resolve()) for i in images)
    return tuple(disk_device(i) for i in range(len(images)))


def in_test_hosts(config, run_timeout, runs, words, per_host, script, record, progress):
    """Runs words = [(tag, limit, function, arguments)] of `runs`, per_host of them in each test host boot (config,
    a boot that freezes or fails loses only its own runs); script(words) writes a boot's script, record(run) makes a
    record. Returns (records, the test hosts' problems, their exit codes, their console's last lines, their
    host-side I/O figures)."""
    records, notes, codes, console, host_io = [], [], [], [], []
    for first in range(0, len(runs), per_host):
        collector = Collector(runs[first:first + per_host], progress)
        with tempfile.NamedTemporaryFile("w", prefix="boot-bench.", suffix=".sh") as file:
            file.write(script(words[first:first + per_host]))
            file.flush()
            code, hang, messages = run_script(config, file.name, collector, len(collector.order), run_timeout)
        mine = [record(run) for run in collector.ordered()]
        found = host_notes(collector, code, hang, messages, failed=any(r["problems"] for r in mine))
        records, notes, codes, host_io = records + mine, notes + found, codes + [code], host_io + collector.host_io
        console += list(collector.console)[-20:] if found else []
        if hang == "interrupted":  # Ctrl-C or SIGTERM: what ran is kept, nothing more starts
            records += [record(run) for run in runs[first + per_host:]]
            break
    return records, notes, codes, console, host_io


def measure(args, guest, machines, kinds):
    binaries = builds(args)
    reporting = {name: supports_report(path) for name, path in binaries.items()}
    plan = schedule(args.warmup, args.reps, len(machines), kinds)
    runs = [Run(tag, phase, rep, v.name) for tag, phase, rep, _, v in plan]
    expected = lambda mi: machines[mi].disks + len(guest.images)
    placed = {tag: (mi, v) for tag, _, _, mi, v in plan}
    vm_guest = Guest(guest.kernel, guest.initrd, guest.cmdline, image_paths(guest.images))
    words = []
    for tag, _, _, mi, v in plan:
        build = "mvmm" if v.build is None else f"mvmm-{v.build}"
        report = f"/tmp/boot-bench/{tag}.report.json" if v.vmm == "mvmm" and reporting[build] else None
        words.append((tag, args.run_timeout, v.function(), vmm_words(vm_guest, machines[mi], v, args.qemu_firmware,
                                                                     report)))

    def progress(run):
        mi, v = placed[run.tag]
        f = run.figures(expected(mi))
        show = lambda k: "-" if f[k] is None else f"{f[k]:.2f}"
        problems = run.problems(expected(mi), not args.no_markers, args.io)
        done = sum(1 for r in runs if r.end is not None)
        io = f"; 4K random {show('randread_iops')} IOPS, 64K seq {show('seqread_mib_s')} MiB/s" if args.io else ""
        say(f"[{done}/{len(runs)}] {'warm-up ' if run.phase == 'w' else ''}rep {run.rep} "
            f"{machines[mi].label(axes)} {run.variant}: init {show('init_s')}, all disks {show('all_disks_s')}, "
            f"exit {show('exit_s')} s{io}" + (f"; FAILED: {', '.join(problems)}" if problems else ""))

    axes = varying_axes(machines)
    extra = {"mvmm_b": binaries["mvmm-b"]} if "mvmm-b" in binaries else {}
    qcow2 = [m for m in machines if m.format == "qcow2"]
    filler = guest_image("io_tool") if args.io or qcow2 else None
    qemu_img = [qemu_img_binary()] if qcow2 else []
    dmsetup = [dmsetup_binary()] if args.disk_delay_ms else []
    perf = [perf_binary()] if args.perf else []
    config = HostConfig(mvmm=binaries.get("mvmm", binaries.get("mvmm-a")), peer_qemu=not args.no_qemu,
                        files=tuple(f for f in (guest.kernel, guest.initrd, filler) if f), cpus=args.host_cpus,
                        verbose=args.host_verbose, disk_images=tuple(guest.images),
                        binaries=tuple(p for p in extra.values() if p != binaries.get("mvmm-a"))
                        + tuple(qemu_img + dmsetup + perf))
    per_host = (args.rounds_per_host or args.warmup + args.reps) * len(machines) * len(kinds)
    hugepages = max((m.hugepages_needed() for m in machines if m.hugepages == "2M"), default=0)
    say(f"{len(plan)} boots ({len(machines)} configuration(s) x {', '.join(v.name for v in kinds)} x "
        f"{args.warmup} warm-up + {args.reps} rounds), {args.rounds_per_host or args.warmup + args.reps} rounds per "
        f"test host boot, at most {args.run_timeout:g} s each")
    started, load_before = time.monotonic(), os.getloadavg()[0]
    disk_mib = args.io_disk_mib if args.io else DISK_SIZE_MIB
    overlays = (max(m.disks for m in qcow2), disk_mib, filler, args.cluster_size) if qcow2 else None
    script = functools.partial(host_script, "boot-bench", max((m.disks for m in machines if m.format == "raw"),
                                                              default=0), binaries=extra,
                               hugepages=hugepages, memory_at=IO_DONE if args.io else None,
                               filled=(args.io_disk_mib, filler) if args.io else None, overlays=overlays,
                               host_io_seconds=args.io_seconds if args.io else None, delay_ms=args.disk_delay_ms,
                               perf=args.perf)
    record = lambda run: results.record(run, machines[placed[run.tag][0]].label(axes), placed[run.tag][1],
                                        expected(placed[run.tag][0]), not args.no_markers, args.io)
    records, notes, codes, console, host_io = in_test_hosts(config, args.run_timeout, runs, words, per_host, script,
                                                            record, progress)
    setup = {"reps": args.reps, "warmup": args.warmup, "guest": vars(guest) | {"images": list(guest.images)},
             "io": {"seconds": args.io_seconds, "disk_mib": args.io_disk_mib, "filler": binary_id(Path(filler)),
                    "disk_delay_ms": args.disk_delay_ms} if args.io else None,
             "host_io": host_io,
             "qcow2": {"disk_mib": disk_mib, "cluster_bytes": args.cluster_size, "l2_cache_size": args.l2_cache_size,
                       "qemu_img": binary_id(Path(qemu_img[0]))} if qcow2 else None,
             "machines": [vars(m) for m in machines], "variants": [v.name for v in kinds],
             "mvmm": {name: binary_id(path) for name, path in binaries.items()}, "qemu": not args.no_qemu,
             "qemu_firmware": args.qemu_firmware, "host_cpus": args.host_cpus, "run_timeout_s": args.run_timeout,
             "where": "directly" if direct_kvm_usable() else
                      f"{len(codes)} test host boot(s) ({args.host_cpus} CPUs)",
             "wall_s": round(time.monotonic() - started), "hostvm_exit_code": max(codes, key=abs),
             "test_host_console_tail": console[-40:],
             "load_average": f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after"}
    return {"tool": "boot-bench", "format": 2, "config": setup, "records": records, "test_host_problems": notes}


def document(doc, threshold=None, baseline=None):
    """Adds (or recomputes) the summary, ratios, problems and gate of a document holding config and records."""
    records = doc["records"] = [results.rederived(r) for r in doc["records"]]
    doc["summary"] = results.summarize(records)
    doc["ratios"] = results.ratios(records)
    doc["problems"] = [f"{r['tag']}: {', '.join(r['problems'])}" for r in records if r["problems"]] + \
        doc["test_host_problems"]
    doc["gate"] = None if threshold is None else results.gate(records, threshold, baseline)
    return doc


def load(path):
    doc = json.loads(path.read_text())
    if doc.get("tool") != "boot-bench" or doc.get("format") != 2:
        raise ValueError("not a boot-bench.json of this version (format 2)")
    return doc


def write_outputs(doc, args, text):
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    if not args.out:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "boot-bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "boots.csv").write_text(results.csv_text(doc["records"]))
    (args.out / "summary.txt").write_text(text + "\n")
    for r in doc["records"]:
        if r["run"].get("profile"):
            (args.out / f"profile-{r['tag']}.txt").write_text("\n".join(r["run"]["profile"]) + "\n")
    written = [] if args.plots == "none" else plots.write_all(doc, args.out, args.plots)
    say(written if isinstance(written, str) else f"wrote {args.out}/: boot-bench.json, boots.csv, summary.txt"
        + "".join(f", {p.name}" for p in written))


def verdict(doc, args):
    if args.threshold is None:
        return 1 if doc["problems"] else 0
    if doc["problems"] or not doc["gate"]["comparisons"]:
        say("the gate cannot decide: " + ("; ".join(doc["problems"][:3]) or "nothing to compare"))
        return EXIT_UNDECIDED
    return 1 if doc["gate"]["regressions"] else 0


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a killed bench stops its test host too
    args = parse_args(argv)
    if args.hotplug_cycles is not None:
        try:
            return hotplug.run(args)
        except SetupError as e:
            say(str(e))
            return 2
    undecided = EXIT_UNDECIDED if args.threshold is not None else 2
    try:
        baseline = [results.rederived(r) for r in load(args.baseline)["records"]] if args.baseline else None
        if args.report:
            doc = load(args.report)
        else:
            kernel = args.kernel or guest_image("kernel")
            initrd = args.initrd if args.kernel else guest_image("guest_initrd")
            cmdline = args.cmdline or (IO_CMDLINE.format(args.io_seconds) if args.io else Guest(kernel).cmdline)
            guest = Guest(kernel, initrd, cmdline,
                          tuple(str(Path(i).resolve()) for i in args.disk_image))
            machines = matrix(args)
            doc = measure(args, guest, machines, variants(args))
        doc = document(doc, args.threshold, baseline)
    except SetupError as e:
        say(str(e))
        return undecided
    except (OSError, ValueError, KeyError, TypeError) as e:
        say(f"cannot read {args.report or args.baseline}: {e}")
        return undecided
    text = tables.report(doc)
    print(text)
    write_outputs(doc, args, text)
    return verdict(doc, args)
