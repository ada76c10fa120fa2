"""The virtio-blk request path without a guest CPU, for every request-alloc mode and heap allocator, in one run.

  tools/request-bench [--allocators glibc,jemalloc,tcmalloc] [--reps 3] [--requests 20000] [--queues 4]
                      [--depth 32] [--io-threads 2] [--profile-requests 400] [--no-profile] [--build DIR]
                      [--aio io_uring|threads|sync] [--json FILE]

build/tools/request-bench (tools/request_bench.cc) plays the guest driver over the real device code and I/O threads
(a virtio-blk disk: 4 KiB random reads and 64 KiB sequential reads, --depth requests in flight on each of --queues
queues, a raw image on /dev/shm, aio= as --aio says) for --request-alloc pool, malloc and calloc; its own --devices scsi and
--workloads mixed, which its --short CI test runs, are not part of this comparison. This tool runs it with glibc's malloc and with
Debian's jemalloc and tcmalloc (libjemalloc2, libtcmalloc-minimal4; tools/setup installs them) put in front by
LD_PRELOAD: one build, three allocators. Repetitions are interleaved: every round runs every allocator, each of
them every mode and load, the allocators' order rotating from round to round.

Reported per load, allocator and mode: median [min-max] IOPS, CPU ns per request (the whole process by getrusage,
the driver threads included; and the I/O threads alone, from their schedstat) and the I/O threads' heap
allocations per request (counted by a malloc/operator new hook in front of the allocator). Then, unless --no-profile, one run of each under
valgrind --tool=callgrind, counting only the measured requests on every thread (driver and I/O threads; the
counters are zeroed when they start and dumped when they end): instructions per request and
the share of them in memset and in malloc/calloc/realloc/free (inclusive of the allocator's internals, calloc's
zeroing included). Callgrind serialises the threads: its shares are of the work, not of the wall time.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
from pathlib import Path

from mvmmtools import REPO
from mvmmtools.say import say

ALLOCATORS = ("glibc", "jemalloc", "tcmalloc")
MODES = ("pool", "malloc", "calloc")
LOADS = ("rand4k", "seq64k")
ALLOC_FUNCTIONS = ("malloc", "calloc", "realloc", "free", "posix_memalign")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="request-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS), help="glibc,jemalloc,tcmalloc (default all)")
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--requests", type=int, default=20000, help="measured requests per queue and run")
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--depth", type=int, default=32)
    ap.add_argument("--io-threads", type=int, default=2)
    ap.add_argument("--profile-requests", type=int, default=400, help="per queue, under callgrind (default 400)")
    ap.add_argument("--no-profile", action="store_true", help="skip the callgrind runs")
    ap.add_argument("--build", type=Path, default=REPO / "build", help="the build directory (default build/)")
    ap.add_argument("--aio", default="io_uring", choices=["io_uring", "threads", "sync"],
                    help="virtio-blk's aio= mode for every run (default io_uring)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write every figure as JSON to FILE")
    args = ap.parse_args(argv)
    args.allocators = [a.strip() for a in args.allocators.split(",") if a.strip()]
    if not args.allocators or any(a not in ALLOCATORS for a in args.allocators) or args.reps < 1:
        ap.error("--allocators takes names from glibc,jemalloc,tcmalloc; --reps at least 1")
    return args


# What LD_PRELOAD puts in front of glibc's malloc for each allocator.
PRELOAD = {"glibc": None, "jemalloc": "libjemalloc.so.2", "tcmalloc": "libtcmalloc_minimal.so.4"}


def environment(allocator):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if PRELOAD[allocator]:
        env["LD_PRELOAD"] = PRELOAD[allocator]
    return env


def binary(build):
    """build/tools/request-bench, brought up to date."""
    subprocess.run(["ninja", "-C", str(build), "-j2", "tools/request-bench"], check=True, stdout=subprocess.DEVNULL)
    return build / "tools" / "request-bench"


def common_args(args):
    return ["--queues", str(args.queues), "--depth", str(args.depth), "--io-threads", str(args.io_threads),
            "--aios", args.aio, "--json"]


def samples(output, allocator, rep):
    found = []
    for line in output.splitlines():
        if line.startswith("{"):
            sample = json.loads(line)
            if sample["allocator"] != allocator:
                raise RuntimeError(f"the {allocator} build runs {sample['allocator']}'s malloc")
            found.append({**sample, "rep": rep})
    return found


def measure(args, bench):
    found = []
    for rep in range(1, args.reps + 1):
        shift = (rep - 1) % len(args.allocators)
        for allocator in args.allocators[shift:] + args.allocators[:shift]:
            say(f"round {rep}/{args.reps}: {allocator}")
            out = subprocess.run([str(bench), "--reps", "1", "--requests", str(args.requests)] + common_args(args),
                                 env=environment(allocator), check=True, capture_output=True, text=True).stdout
            found += samples(out, allocator, rep)
    return found


def annotate(profile):
    """{function: inclusive Ir} and the total, from callgrind_annotate.  Our hook's malloc & co. (in the
    request-bench binary) stand in front of the allocator's, so only theirs are taken."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(profile)],
                          check=True, capture_output=True, text=True).stdout
    total, functions = None, {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(.*)$", line)
        if not m:
            continue
        cost, what = int(m.group(1).replace(",", "")), m.group(2)
        if "PROGRAM TOTALS" in what:
            total = cost
            continue
        name = re.sub(r"\s*\[.*\]$", "", what).rsplit(":", 1)[-1].strip()
        obj = re.search(r"\[(.*)\]$", what)
        key = (name, obj.group(1) if obj else "")
        functions[key] = max(functions.get(key, 0), cost)
    return total, functions


def profile(args, bench):
    found = []
    for allocator in args.allocators:
        for mode in MODES:
            for load in LOADS:
                with tempfile.NamedTemporaryFile(prefix="request-bench.", suffix=".callgrind") as out:
                    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out.name}",
                           str(bench), "--callgrind", "--reps", "1", "--modes", mode, "--workloads",
                           load, "--requests", str(args.profile_requests), "--image-size", "64M"] + common_args(args)
                    run = subprocess.run(cmd, env=environment(allocator), check=True, capture_output=True,
                                         text=True)
                    requests = samples(run.stdout, allocator, 1)[0]["requests"]
                    window = Path(f"{out.name}.1")  # the measured requests' dump (--callgrind)
                    try:
                        total, functions = annotate(window)
                    finally:
                        window.unlink(missing_ok=True)
                memset = sum(c for (n, _), c in functions.items() if "memset" in n)
                alloc = sum(c for (n, obj), c in functions.items() if n in ALLOC_FUNCTIONS and "request-bench" in obj)
                found.append({"allocator": allocator, "mode": mode, "workload": load, "requests": requests,
                              "instructions_per_request": round(total / requests),
                              "memset_percent": round(100 * memset / total, 2),
                              "malloc_free_percent": round(100 * alloc / total, 2)})
                say(f"profile {allocator} {mode} {load}: {found[-1]['instructions_per_request']} instructions "
                    f"per request, memset {found[-1]['memset_percent']}%, malloc/free "
                    f"{found[-1]['malloc_free_percent']}%")
    return found


FIGURES = [("iops", "IOPS", 0), ("cpu_ns_per_request", "cpu ns/req", 0),
           ("io_thread_ns_per_request", "I/O thread ns/req", 0), ("allocations_per_request", "allocs/req", 2)]


def report(args, runs, profiles):
    out = [f"request-bench: {args.queues} queues x depth {args.depth}, {args.io_threads} I/O threads, "
           f"{args.requests} requests per queue and run, {args.reps} interleaved rounds; median [min-max]"]
    header = ["load", "allocator", "mode"] + [h for _, h, _ in FIGURES]
    rows = []
    for load in LOADS:
        for allocator in args.allocators:
            for mode in MODES:
                group = [r for r in runs if (r["workload"], r["allocator"], r["mode"]) == (load, allocator, mode)]
                if not group:
                    continue
                cells = []
                for key, _, digits in FIGURES:
                    values = [r[key] for r in group]
                    cells.append(f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-"
                                 f"{max(values):.{digits}f}]")
                rows.append([load, allocator, mode] + cells)
    if profiles:
        out_rows = [[p["workload"], p["allocator"], p["mode"], str(p["instructions_per_request"]),
                     f"{p['memset_percent']:.2f}", f"{p['malloc_free_percent']:.2f}"] for p in profiles]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    out += ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [header] + rows]
    if profiles:
        header = ["load", "allocator", "mode", "instructions/req", "memset %", "malloc/free %"]
        widths = [max(len(r[i]) for r in [header] + out_rows) for i in range(len(header))]
        out += ["", f"callgrind, {args.profile_requests} requests per queue, counted on every thread while they run"]
        out += ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                for r in [header] + out_rows]
    return "\n".join(out)


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    args = parse_args(argv)
    try:
        bench = binary(args.build)
        runs = measure(args, bench)
        profiles = [] if args.no_profile else profile(args, bench)
    except (subprocess.CalledProcessError, RuntimeError, OSError) as e:
        detail = getattr(e, "stderr", None) or ""
        say(f"failed: {e}\n{detail}")
        return 1
    print(report(args, runs, profiles))
    if args.json:
        args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json), "build": str(args.build)}, "runs": runs,
                                         "profiles": profiles}, indent=1) + "\n")
    return 0
