"""Boot benchmark and regression gate: mvmm (one build, or builds A and B) and Debian's QEMU boot the same guest
in a matrix of configurations, interleaved, in one test host boot (a new one every --rounds-per-host rounds;
none where /dev/kvm runs standard guests); per-boot JSON and CSV, a summary with paired ratios and bootstrap
confidence intervals, plots, and a gate against a threshold.

  tools/boot-bench [--reps 5] [--disks 0,1,64] [--disk-bus rootport,root] [--memory 512M,1G]
                   [--hugepages none,2M] [--prealloc off,on] [--cpus 1,2] [--trim-policies off,batch,drain,adaptive]
                   [--request-allocs pool,malloc,calloc] [--io [--io-seconds 5] [--io-disk-mib 256]]
                   [--aios io_uring,threads,sync] [--disk-delay-ms N]
                   [--disk-format raw,qcow2 [--l2-cache-size 4M] [--cluster-size 64K] [--cache-allocs mapping,heap]]
                   [--mvmm PATH | --mvmm-a PATH --mvmm-b PATH] [--no-qemu] [--qemu-firmware seabios|qboot]
                   [--kernel FILE] [--initrd FILE] [--cmdline TEXT] [--disk-image FILE]... [--no-markers]
                   [--out DIR] [--json FILE] [--plots png|svg|none]
                   [--threshold 5%] [--baseline FILE]
                   [--warmup 0] [--run-timeout SEC] [--host-cpus N] [--host-verbose] [--rounds-per-host N]
  tools/boot-bench --hotplug-cycles N [--trim-policies ...] [--no-qemu] [--mvmm PATH] [--out DIR]
  tools/boot-bench --report FILE [--out DIR] [--threshold 5%] [--baseline FILE]
                   the summary (and plots, gate) again from the boot-bench.json of an earlier run

What it measures, per boot (the README's "Benchmarks" has the whole list):
- times from the VMM's exec, stamped inside the test host (/proc/uptime, 10 ms steps) the same way for mvmm and
  QEMU: mvmm's first KVM_RUN (its debug line), the guest's `MVMM-MARK init`, the last `disk` marker (all disks),
  the exit; and the phases between them (setup, kernel, disks, shutdown, total), which the gate checks;
- memory from /proc/<pid> at the guest's poweroff marker (--io: its io-done marker), the same way for both VMMs:
  VmHWM, guest RAM's Rss (the largest mapping), the peak beyond guest RAM, the [heap] mapping's Rss and Size
  (glibc's main arena) and the Rss of glibc's thread arenas (64 MiB-aligned reservations);
- mvmm's own --report document (phase timestamps in ns, heap after the disks and at exit, trims, RCU,
  address-space rebuilds, VM exits by kind and device), kept whole per boot in the JSON; the gate checks its
  set-up steps too (start -> RAM ready -> devices ready -> guest loaded -> first KVM_RUN).

The matrix: every combination of --disks, --disk-bus, --disk-kind, --memory, --hugepages, --prealloc and --cpus
is one configuration; in each, every variant boots once per round: each mvmm build (A/B) per --request-allocs
mode and per trim policy, and QEMU (unless --no-qemu) with the same machine (disks behind pcie-root-ports or on
bus 0, a memory backend for hugepages/prealloc). Times drift within a test host boot, so the order changes from
round to round: the configurations rotate by one, and the variants take a rotation and then its reverse
(A,B,Q / Q,B,A / B,Q,A / A,Q,B / ...), so that any two variants run in each order equally often
(tools/mvmmtools/bench/schedule.py); paired ratios compare the variants within each round.

The gate (--threshold, e.g. 5%): build B against build A in the same rounds (paired: the geometric mean of the
rounds' B/A ratios), and with --baseline FILE (the boot-bench.json of an earlier run) every mvmm variant against
the same variant and configuration there (unpaired: the ratio of the two runs' geometric means; each boot's
times divided by QEMU's total time in its round when both runs have QEMU, since absolute times differ between
test host boots). A phase is a regression only when its ratio is above 1 + threshold AND a one-sided lower
confidence bound of that ratio is above 1: Student's t on the rounds' log ratios (paired) or Welch's t on the
two runs' log values (unpaired), at 1 - 5%/k for k comparisons (Bonferroni: phases x configurations x variants),
so that two identical builds fail in about 5% of runs at most (tools/mvmmtools/bench/tests/test_gate.py
checks that on recorded noise). Fewer than 3 rounds (unpaired: 3 on each side) can flag nothing: the gate passes.
The bootstrap intervals in the summary are for reading, not for the gate: tools/mvmmtools/bench/stats.py says why.

--io: the memory-policy experiment (README.md, "Benchmarks"): the guest (guest-images/scripts/io-bench) reads its
filled disks with O_DIRECT, 4 KiB random reads over every disk at once (32 / disks in flight on each, at least one),
then 64 KiB sequential reads of the first at depth 32, --io-seconds each; mvmm once per --request-allocs x
--trim-policies (default pool,malloc,calloc x off,drain,adaptive) x --aios (aio= of the disks; default mvmm's), and
QEMU (its default aio=threads, and aio=io_uring too when --aios has io_uring). Rates, boot and workload times,
per read of each workload the block device requests, read merges and virtio interrupts the guest kernel counted
(/sys/block/<disk>/stat, /proc/interrupts) and the VMM's host CPU time (in all, its vCPUs, io_uring's workers, its
other threads), memory at the guest's io-done marker, trims (and the qcow2 caches);
the summary has a row per variant. Before the boots the test host runs the same two workloads itself on the first
raw disk's file (through the page cache, as both VMMs read it): the host-side limit, and each variant's rates as a
fraction of it.

--disk-delay-ms N: a slow disk, where a VMM that keeps one request in flight (mvmm's aio=sync) gets one request per
device latency whatever the guest's depth, and one that keeps the guest's 32 gets up to 32 times that (in the TCG
test host a request to a 10 ms dm-delay takes 17-21 ms: compare with the host-side limit). In the test host each
raw --disks disk file goes behind a loop device and a device-mapper delay target (`dmsetup create bb-delayI
--table "0 SECTORS delay /dev/loopX 0 N"`: every read and write held N ms; Debian's dmsetup is copied in, the test
host loads loop and dm_delay), and both VMMs get /dev/mapper/bb-delayI with cache=none (O_DIRECT, so that the
host's page cache does not answer reads the device already served); the host-side limit reads that device with
O_DIRECT. Raw disks only (not --disk-format qcow2); not where the runs happen on this machine directly.

--disk-format qcow2: the --disks disks are qcow2 overlays (`qemu-img create -f qcow2 -b base.qcow2 -F qcow2`),
made in the test host, of one qcow2 base of --io-disk-mib MiB (without --io: 64 MiB) with --cluster-size clusters,
every one allocated and filled with mvmm-io's pattern, so reads go through the base's L2 tables; the overlays are
empty. mvmm gets `--disk path,format=qcow2[,l2-cache-size=X]` (its caches' sizes hold for the whole backing
chain), QEMU `-drive ...,format=qcow2[,l2-cache-size=X]` (the overlay's; the base keeps QEMU's default, which
covers the whole of a base this small). `--disk-format raw,qcow2` makes both kinds of disk and boots every variant
on each, in the same test host boot. --cache-allocs: every mvmm build once per --cache-alloc mode (the qcow2
caches as one mapping per cache, or one heap allocation per table); QEMU boots once. With --io the random reads
cover the whole of every disk (one reader per disk), so the caches fill.

--hotplug-cycles N: the hot-plug experiment instead of boots (tools/mvmmtools/bench/hotplug.py): in one test host
boot, a guest per variant takes N virtio-blk disks one after another (add-disk, the guest writes and reads the disk
and powers its slot off, mvmm releases it); mvmm per --trim-policies policy (default all four) and QEMU over QMP on
the same layout. Cycle time, heap Rss, RSS, fds, trims and trim time over the cycles; hotplug-summary.txt in --out.

Output (--out DIR): boot-bench.json (set-up, every boot, summary, ratios, gate), boots.csv (one row per boot),
summary.txt (what is printed), and phases/memory/trim/ratios (and io) plots.
Exit code: 0 all boots complete (and with --threshold: no regression); 1 some boots failed (without
--threshold), or a regression;
2 bad arguments or set-up. With --threshold, a run that cannot decide (boots failed, nothing comparable, set-up
failed) exits 125, which `git bisect run` takes as "skip this commit".
"""

import argparse
from pathlib import Path

from mvmmtools.bench.guest_config import (DISK_BUSES, DISK_FORMATS, DISK_KINDS, HUGEPAGE_SIZES, MAX_DISKS,
                                          QEMU_FIRMWARE, size_bytes)
from mvmmtools.testhost import DEFAULT_MVMM, HOST_CPUS

TRIM_POLICIES = ("off", "batch", "drain", "adaptive")
REQUEST_ALLOCS = ("pool", "malloc", "calloc")
IO_POLICIES = ["off", "drain", "adaptive"]  # --io's default trim policies
CACHE_ALLOCS = ("mapping", "heap")  # mvmm's --cache-alloc
AIO_MODES = ("io_uring", "threads", "sync")  # mvmm's --disk aio=
QCOW2_CLUSTER_SIZE = "64K"  # qemu-img's default


def listed(kind, choices=None):
    """An argparse type: a comma-separated list of `kind`, each in `choices` when given."""
    def parse(text):
        try:
            values = [kind(w.strip()) for w in text.split(",") if w.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e))
        if not values or (choices and any(v not in choices for v in values)) or len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"'{text}': distinct values" + (f" from {','.join(map(str, choices))}"
                                                                              if choices else ""))
        return values
    return parse


def percent(text):
    value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"'{text}': a slowdown like 5% or 0.05")
    return value


def on_off(text):
    return {"on": True, "off": False}[text]


def check_qcow2(ap, args):
    """The qcow2 options: sizes QEMU and mvmm both read, and only with qcow2 disks."""
    if "qcow2" not in args.disk_format:
        if args.l2_cache_size or args.cache_allocs or args.cluster_size != QCOW2_CLUSTER_SIZE:
            ap.error("--l2-cache-size, --cluster-size and --cache-allocs need --disk-format qcow2")
        return
    if 0 in args.disks:
        ap.error("--disk-format qcow2 needs --disks 1 or more")
    try:
        cluster = size_bytes(args.cluster_size)
        cache = size_bytes(args.l2_cache_size) if args.l2_cache_size else 1
    except ValueError:
        cluster = cache = 0
    if not 512 <= cluster <= 2 << 20 or cluster & (cluster - 1) or cache < 1:
        ap.error("--cluster-size takes a power of two from 512 to 2M, --l2-cache-size a size like 4M")
    args.cluster_size = cluster


def check_disk_delay(ap, args):
    """--disk-delay-ms: raw disks only (bb_delay puts raw disk files behind dm-delay), at least one."""
    if args.disk_delay_ms is None:
        return
    if args.disk_format != ["raw"]:
        ap.error("--disk-delay-ms needs --disk-format raw: qcow2 overlays are files, not put behind dm-delay")
    if not 1 <= args.disk_delay_ms <= 10000 or 0 in args.disks:
        ap.error("--disk-delay-ms takes 1..10000 ms and --disks 1 or more")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="boot-bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_argument_group("the guest (default: guest-images' kernel and initramfs, markers script)")
    g.add_argument("--kernel", help="the guest's bzImage")
    g.add_argument("--initrd", help="its initramfs (with --kernel: none unless given)")
    g.add_argument("--cmdline", help="its command line (default: console=ttyS0 quiet mvmm.script=markers; --io: "
                                     "mvmm.script=io-bench)")
    g.add_argument("--disk-image", action="append", default=[], metavar="FILE",
                   help="a raw disk image every VMM gets read-only, after the --disks ones; repeatable")
    g.add_argument("--no-markers", action="store_true",
                   help="the guest prints no MVMM-MARK lines: only mvmm's first KVM_RUN, the exit and mvmm's "
                        "report are timed")
    m = ap.add_argument_group("the matrix (comma-separated lists): the configurations, and the variants that boot "
                              "each")
    m.add_argument("--disks", type=listed(int),
                   help="sparse 64 MiB disks (default 0); --io: disks of --io-disk-mib, filled (default 1); "
                        "--disk-format qcow2: overlays of a filled base")
    m.add_argument("--disk-bus", type=listed(str, DISK_BUSES), default=["rootport"],
                   help="each disk behind its own PCIe root port, or on bus 0 (default rootport)")
    m.add_argument("--disk-kind", type=listed(str, DISK_KINDS), default=["blk"],
                   help="blk: virtio-blk (default); scsi: LUNs of one virtio-scsi controller, 31 root ports")
    m.add_argument("--scsi", type=int, metavar="N",
                   help="the seeds' case: --disks N --disk-kind scsi (one controller, N LUNs, 31 root ports)")
    m.add_argument("--memory", type=listed(str), default=["512M"], help="guest RAM (default 512M)")
    m.add_argument("--hugepages", type=listed(str, ("none",) + HUGEPAGE_SIZES), default=["none"])
    m.add_argument("--prealloc", type=listed(on_off), default=[False], metavar="off,on")
    m.add_argument("--cpus", type=listed(int), default=[2], help="guest CPUs (default 2)")
    m.add_argument("--trim-policies", type=listed(str, TRIM_POLICIES), metavar="P,P,...",
                   help="every mvmm build once per policy (default: mvmm's default policy; --io: off,drain,adaptive)")
    m.add_argument("--request-allocs", type=listed(str, REQUEST_ALLOCS), metavar="M,M,...",
                   help="every mvmm build once per --request-alloc mode (default: mvmm's; --io: pool,malloc,calloc)")
    m.add_argument("--disk-format", type=listed(str, DISK_FORMATS), default=["raw"], metavar="raw,qcow2",
                   help="the --disks disks: raw images (default), or qcow2 overlays of one filled base (above)")
    m.add_argument("--l2-cache-size", metavar="SIZE", help="qcow2: l2-cache-size= for mvmm and QEMU (e.g. 4M; "
                                                           "default: each VMM's)")
    m.add_argument("--cluster-size", default=QCOW2_CLUSTER_SIZE, metavar="SIZE",
                   help=f"qcow2: the base's cluster size, 512 to 2M (default {QCOW2_CLUSTER_SIZE})")
    m.add_argument("--cache-allocs", type=listed(str, CACHE_ALLOCS), metavar="M,M",
                   help="qcow2: every mvmm build once per --cache-alloc mode (default: mvmm's)")
    m.add_argument("--disk-delay-ms", type=int, metavar="N",
                   help="raw disks: each --disks disk behind a loop device and a dm-delay target holding every read "
                        "and write N ms, given to both VMMs with cache=none (a slow disk; see --io above)")
    m.add_argument("--aios", type=listed(str, AIO_MODES), metavar="M,M,...",
                   help="virtio-blk: every mvmm build once per aio= mode of its --disks disks (default: mvmm's, "
                        "io_uring where the kernel has it); QEMU also with aio=io_uring when io_uring is one")
    m.add_argument("--mvmm", type=Path, default=DEFAULT_MVMM, help=f"the mvmm binary (default {DEFAULT_MVMM})")
    m.add_argument("--mvmm-a", type=Path, help="build A (the reference) of an A/B comparison")
    m.add_argument("--mvmm-b", type=Path, help="build B (the candidate)")
    m.add_argument("--no-qemu", action="store_true", help="no QEMU runs")
    m.add_argument("--qemu-firmware", choices=sorted(QEMU_FIRMWARE), default="seabios",
                   help="QEMU's firmware (default seabios; qboot skips SeaBIOS's disk scan)")
    w = ap.add_argument_group("the I/O workload (see --io above)")
    w.add_argument("--io", action="store_true", help="the guest runs the I/O workloads; rates and memory reported")
    w.add_argument("--io-seconds", type=int, default=5, help="each workload's length in the guest (default 5)")
    w.add_argument("--io-disk-mib", type=int, default=256, help="each disk's size in MiB (qcow2: the base's; default 256)")
    r = ap.add_argument_group("runs")
    r.add_argument("--reps", type=int, default=5, help="measured rounds (default 5)")
    r.add_argument("--warmup", type=int, default=0, help="uncounted rounds first (default 0)")
    r.add_argument("--run-timeout", type=float, metavar="SEC",
                   help="one boot's limit (default 240 s + 6 s per disk and per --disk-image, + 2 x --io-seconds)")
    r.add_argument("--host-cpus", type=int, default=HOST_CPUS, metavar="N", help="the test host VM's CPUs")
    r.add_argument("--rounds-per-host", type=int, metavar="N",
                   help="a new test host boot every N rounds (default: all in one); a round is never split, so its "
                        "variants stay paired, and a test host that freezes takes only its own rounds along")
    r.add_argument("--host-verbose", action="store_true", help="the test host's kernel messages too")
    r.add_argument("--perf", action="store_true",
                   help="profile every VMM run in the test host (perf record -e cpu-clock -F 499 -p, attached at "
                        "the guest's init marker, with --io its io-start marker, until the VMM exits; Debian's "
                        "linux-perf): the share of samples per thread name and the top symbols per thread name, "
                        "written to --out DIR/profile-TAG.txt")
    o = ap.add_argument_group("output and gate")
    o.add_argument("--out", type=Path, metavar="DIR", help="write boot-bench.json, boots.csv, summary.txt, plots")
    o.add_argument("--json", type=Path, metavar="FILE", help="also write the JSON document to FILE")
    o.add_argument("--plots", choices=("png", "svg", "none"), default="png", help="plot format in --out (png)")
    o.add_argument("--threshold", type=percent, help="gate: fail on a phase slower than this, outside the noise")
    o.add_argument("--baseline", type=Path, metavar="FILE", help="gate: compare with this earlier boot-bench.json")
    o.add_argument("--report", type=Path, metavar="FILE", help="run nothing: recompute from an earlier JSON")
    h = ap.add_argument_group("hot-plug (tools/mvmmtools/bench/hotplug.py)")
    h.add_argument("--hotplug-cycles", type=int, metavar="N",
                   help="instead of boots: N disk add/remove cycles in one running guest per --trim-policies "
                        "policy (default all four) and QEMU; cycle time, heap and RSS, fds, trims and trim time")
    args = ap.parse_args(argv)
    if args.hotplug_cycles is not None:
        if args.hotplug_cycles < 1 or args.disk_delay_ms is not None or args.perf:
            ap.error("--hotplug-cycles must be at least 1 and takes no --disk-delay-ms or --perf")
        return args
    args.disks = args.disks or [1 if args.io else 0]
    args.trim_policies = args.trim_policies or (IO_POLICIES if args.io else [None])
    args.request_allocs = args.request_allocs or (list(REQUEST_ALLOCS) if args.io else [None])
    if args.io and (args.scsi is not None or "scsi" in args.disk_kind or 0 in args.disks or
                    not 1 <= args.io_seconds <= 3600 or args.io_disk_mib < 1):
        ap.error("--io needs virtio-blk disks (--disks 1 or more), --io-seconds 1..3600 and --io-disk-mib >= 1")
    if args.scsi is not None:
        args.disks, args.disk_kind = [args.scsi], ["scsi"]
    check_qcow2(ap, args)
    check_disk_delay(ap, args)
    args.cache_allocs = args.cache_allocs or [None]
    if args.aios and "scsi" in args.disk_kind:
        ap.error("--aios is for virtio-blk disks (a SCSI LUN has no aio=)")
    args.aios = args.aios or [None]
    if args.reps < 1 or args.warmup < 0 or (args.rounds_per_host or 1) < 1:
        ap.error("--reps and --rounds-per-host must be at least 1 and --warmup not negative")
    if any(not 0 <= d <= MAX_DISKS for d in args.disks) or any(not 1 <= c <= 255 for c in args.cpus):
        ap.error(f"--disks must be 0..{MAX_DISKS} and --cpus 1..255")
    if (args.mvmm_a is None) != (args.mvmm_b is None):
        ap.error("--mvmm-a and --mvmm-b go together")
    if args.baseline and args.threshold is None:
        ap.error("--baseline needs --threshold")
    try:
        [size_bytes(s) for s in args.memory]
    except ValueError:
        ap.error(f"--memory takes sizes like 512M or 1G, not {','.join(args.memory)}")
    if args.run_timeout is None:
        args.run_timeout = 240 + 6 * max(args.disks) + 6 * len(args.disk_image) + 2 * args.io * args.io_seconds
    return args
