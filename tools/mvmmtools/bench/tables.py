"""Boot-bench's text report: per configuration the medians [min-max] of every variant, the paired ratios with
their confidence intervals, and the gate's verdict."""

import statistics

from mvmmtools.bench.results import (IO, IO_CPU, IO_PER_READ, LABELS, MEMORY, REPORT, SEGMENTS, SETUP,
                                     TIMES)

KIB_PER_MIB = 1024


def table(title, header, rows):
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header))]
    out = [title]
    for row in [header] + rows:
        out.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in
                             enumerate(zip(row, widths))).rstrip())
    return "\n".join(out)


def cell(stat, scale=1.0, digits=2):
    if stat is None:
        return "-"
    f = lambda v: f"{v / scale:.{digits}f}"
    spread = "" if stat["min"] == stat["max"] else f" [{f(stat['min'])}-{f(stat['max'])}]"
    return f(stat["median"]) + spread


def completed(variant, variants, reps):
    """The variant's name, with how many of its rounds were complete when not all were."""
    done = variants[variant]["complete"]
    return variant + ("" if done == reps else f" [{done}/{reps} ok]")


def config_tables(config, variants, reps):
    """The tables of one configuration, a column per variant: times and phases (s), memory (MiB), mvmm's
    report figures."""
    names = list(variants)
    header = [config] + [completed(v, variants, reps) for v in names]
    m = lambda v, k: variants[v]["metrics"].get(k)
    out = []
    for title, keys, scale, digits in (
            ("s from exec, median [min-max]", TIMES, 1, 2), ("phases, s", SEGMENTS, 1, 2),
            ("mvmm set-up from its --report, s", SETUP, 1, 3),
            ("MiB at the poweroff marker (VmHWM, largest mapping = guest RAM, [heap] and glibc's thread arenas "
             "from smaps)", MEMORY,
             KIB_PER_MIB, 1),
            ("mvmm --report", REPORT, 1, 1)):
        rows = [[h] + [cell(m(v, k), scale, digits) for v in names] for k, h in keys if any(m(v, k) for v in names)]
        if rows:
            out += ["", table(title, header, rows)]
    return out


def io_tables(config, variants, reps):
    """The tables of a configuration whose guest ran the I/O workloads, a row per variant: the boot and workload
    times and rates, what the guest kernel counted per read, then the memory right after the workload, mvmm's
    trims and its qcow2 caches."""
    def rows(columns):
        return [[completed(v, variants, reps)] + [cell(variants[v]["metrics"].get(k), scale, digits)
                                                  for k, scale, digits in columns] for v in variants]
    rates = [("init_s", 1, 2)] + [(k, 1, 1 if k.endswith("mib_s") else 2 if k.endswith("_s") else 0) for k, _ in IO]
    memory = [("peak_rss_kib", KIB_PER_MIB, 1), ("beyond_guest_kib", KIB_PER_MIB, 1), ("guest_thp_kib", KIB_PER_MIB, 1),
              ("heap_rss_kib", KIB_PER_MIB, 1), ("heap_size_kib", KIB_PER_MIB, 1), ("arena_rss_kib", KIB_PER_MIB, 1),
              ("malloc_rss_kib", KIB_PER_MIB, 1), ("r_malloc_io_done_kib", KIB_PER_MIB, 1),
              ("r_malloc_in_use_io_done_kib", KIB_PER_MIB, 1), ("r_trims", 1, 0),
              ("r_trim_ms", 1, 1), ("r_cache_resident_kib", KIB_PER_MIB, 1), ("r_cache_allocated_kib", KIB_PER_MIB, 1)]
    return ["", table(f"{config}: boot and I/O in the guest, median [min-max]",
                      ["variant", "exec -> init s"] + [h for _, h in IO], rows(rates)),
            "", table(f"{config}: per read of each workload, the block device requests, read merges and virtio "
                      "interrupts the guest kernel counted, median [min-max]",
                      ["variant"] + [h for _, h in IO_PER_READ], rows([(k, 1, 3) for k, _ in IO_PER_READ])),
            "", table(f"{config}: the VMM's host CPU per read of each workload, in all and by its threads (vCPUs, "
                      "io_uring's workers, the VMM's other threads, threads that ended meanwhile), us, median "
                      "[min-max]",
                      ["variant"] + [h for _, h in IO_CPU], rows([(k, 1, 1) for k, _ in IO_CPU])),
            "", table(f"{config}: at the end of the workload (MiB from /proc; trims and qcow2 caches at exit, "
                      "from mvmm's --report)",
                      ["variant", "peak RSS", "beyond guest RAM", "guest RAM THP", "heap Rss", "heap size", "arenas Rss",
                       "malloc Rss", "malloc held", "malloc in use", "trims", "trim ms",
                       "caches resident", "caches allocated"], rows(memory))]


def host_limit_lines(host_io, summary, delay_ms=None):
    """The host-side limit (bb_host_io: the guest's reads of the first disk's file, or of its device behind a
    delay_ms dm-delay, done by the test host itself; medians over the test host boots) and each variant's in-guest
    rate as a fraction of it."""
    limit = {}
    for workload, key in (("randread", "iops"), ("seqread", "mib_s")):
        values = [h[key] for h in host_io if h.get("workload") == workload and isinstance(h.get(key), (int, float))]
        if values:
            limit[f"{workload}_{key}"] = statistics.median(values)
    if not limit:
        return []
    what = f"delayed device ({delay_ms} ms dm-delay; O_DIRECT" if delay_ms else "file (page cache"
    out = ["", f"host-side limit: the same reads of the first disk's {what}, native AIO, depth 32) by the test host "
               "itself, outside any guest: " +
           ", ".join(f"{LABELS.get(k, k)} {v:.0f}" for k, v in limit.items())]
    for config, variants in summary.items():
        rows = [[v] + [cell({s: m[k][s] / limit[k] for s in ("median", "min", "max")} if k in m else None)
                       for k in limit] for v, m in ((v, d["metrics"]) for v, d in variants.items())]
        out += ["", table(f"{config}: in-guest rate / host-side limit, median [min-max]",
                          ["variant"] + [LABELS.get(k, k) for k in limit], rows)]
    return out


def ratio_lines(comparisons):
    """'mvmm / qemu  init marker 0.93 [0.90-0.97]' per comparison, grouped by configuration and pair."""
    out, last = [], None
    for c in comparisons:
        head = (c["config"], c["subject"], c["reference"])
        if head != last:
            norm = f", normalized by {c['normalized_by']}" if c.get("normalized_by") else ""
            out.append(f"{c['config']}: {c['subject']} / {c['reference']} ({c['kind']}, n={c['n']}{norm})")
            last = head
        bound = f", lower bound {c['bound']:.3f}" if "bound" in c else ""
        mark = "  REGRESSION" if c.get("regression") else ""
        out.append(f"  {LABELS.get(c['metric'], c['metric']):30} {c['point']:.3f} "
                   f"[{c['lo']:.3f}-{c['hi']:.3f}]{bound}{mark}")
    return out


def gate_lines(gate):
    if gate is None:
        return []
    threshold = f"{gate['threshold']:.1%}"
    out = ["", f"gate: a phase slower than +{threshold} whose one-sided {gate['confidence']:.2%} lower bound "
               f"(Student's t on the rounds' log ratios; against a baseline, Welch's t; Bonferroni over "
               f"{len(gate['comparisons'])} comparisons) is above 1; [95% bootstrap interval]"]
    if not gate["comparisons"]:
        return out + ["gate: nothing to compare (no rounds with both builds, or no matching baseline)"]
    out += ratio_lines(gate["comparisons"])
    if gate["regressions"]:
        out.append("gate: REGRESSION in " + "; ".join(
            f"{c['config']} {c['subject']} {LABELS.get(c['metric'], c['metric'])} x{c['point']:.3f}"
            for c in gate["regressions"]))
    else:
        out.append(f"gate: pass (no phase slower than +{threshold} outside the noise)")
    return out


def report(doc):
    config, summary = doc["config"], doc["summary"]
    out = [f"boot-bench: {len(summary)} configuration(s) x {config['reps']} rep(s) (+{config['warmup']} warm-up), "
           f"{config['where']}; load average here {config['load_average']}",
           f"guest: {config['guest']['kernel']} {config['guest']['cmdline']!r}"]
    out += [f"mvmm{'' if name == 'mvmm' else ' ' + name}: {binary}" for name, binary in config["mvmm"].items()]
    io = config.get("io")
    if io:
        out.append(f"I/O: {io['disk_mib']} MiB disks in the test host's RAM, each workload {io['seconds']} s in the "
                   "guest (O_DIRECT, native AIO; random reads over every disk, 32 / disks in flight per disk, "
                   "sequential ones of the first at depth 32)" +
                   (f"; every disk behind a {io['disk_delay_ms']} ms dm-delay target, both VMMs with cache=none"
                    if io.get("disk_delay_ms") else ""))
    qcow2 = config.get("qcow2")
    if qcow2:
        out.append(f"qcow2: empty overlays of one {qcow2['disk_mib']} MiB base, {qcow2['cluster_bytes']} B clusters "
                   f"all allocated, l2-cache-size {qcow2['l2_cache_size'] or 'default'}")
    for name, variants in summary.items():
        out += (io_tables if io else config_tables)(name, variants, config["reps"])
    out += host_limit_lines(config.get("host_io") or [], summary, (io or {}).get("disk_delay_ms"))
    if doc["ratios"]:
        meaning = "IOPS, MiB/s: > 1 subject faster; memory: < 1 subject smaller" if io else \
            "< 1: subject faster or smaller"
        out += ["", f"paired ratios, geometric mean [95% bootstrap interval] over the rounds ({meaning})"] + \
            ratio_lines(doc["ratios"])
    out += gate_lines(doc.get("gate"))
    if doc["problems"]:
        out += ["", "not counted / problems:"] + [f"  {n}" for n in doc["problems"]]
    complete = sum(1 for r in doc["records"] if not r["problems"])
    out += ["", f"{complete}/{len(doc['records'])} boots complete, {config['wall_s']} s wall time in all"]
    return "\n".join(out)
