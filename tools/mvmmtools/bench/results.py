"""Boot-bench results: one record per boot (runner stamps, memory read at poweroff, mvmm's --report), the summary
per configuration and variant, the paired ratios (mvmm/QEMU, build B/A) and comparisons with a baseline run, and
the regression gate over them. Pure functions of data, so the unit tests drive them with recorded runs."""

import csv
import io
import statistics
from dataclasses import asdict

from mvmmtools.bench import stats
from mvmmtools.bench.guest_config import Variant
from mvmmtools.bench.runs import Run

# Times in s since the VMM's exec, stamped inside the test host (/proc/uptime, 10 ms steps), for every VMM.
TIMES = [("first_kvm_run_s", "first KVM_RUN"), ("guest_clock_start_s", "guest clock 0"), ("init_s", "init marker"),
         ("all_disks_s", "all disks"), ("exit_s", "exit")]
# Phases, each from the end of the one before; the gate checks these, so a slowdown is named where it happens.
SEGMENTS = [("setup_s", "exec -> first KVM_RUN"), ("kernel_s", "first KVM_RUN -> init"),
            ("to_init_s", "exec -> init"), ("disks_s", "init -> all disks"), ("shutdown_s", "all disks -> exit"),
            ("total_s", "exec -> exit")]
# mvmm's set-up in finer steps, from its --report timeline (ns precision, from its process start).
SETUP = [("r_ram_s", "start -> RAM ready"), ("r_devices_s", "RAM -> devices ready"),
         ("r_load_s", "devices -> guest loaded"), ("r_start_s", "guest loaded -> first KVM_RUN")]
# KiB, read from /proc/<pid> at the guest's poweroff marker, the same way for mvmm and QEMU.
MEMORY = [("peak_rss_kib", "peak RSS"), ("beyond_guest_kib", "beyond guest RAM"),
          ("guest_thp_kib", "guest RAM in huge pages"), ("heap_rss_kib", "heap Rss"),
          ("heap_size_kib", "heap size"), ("arena_rss_kib", "thread arenas Rss"),
          ("malloc_rss_kib", "malloc Rss (heap + arenas)")]
# From mvmm's --report (mvmm only).
REPORT = [("r_first_kvm_run_ms", "first KVM_RUN ms"), ("r_first_serial_byte_ms", "first serial byte ms"),
          ("r_heap_after_disks_kib", "heap after disks KiB"), ("r_heap_exit_kib", "heap at exit KiB"),
          ("r_vmm_peak_rss_kib", "VMM peak RSS KiB"), ("r_trims", "trims"), ("r_trim_ms", "trim ms"),
          ("r_rcu_batches", "RCU batches"), ("r_rcu_callbacks", "RCU callbacks"), ("r_as_rebuilds", "AS rebuilds"),
          ("r_as_rebuild_ms", "AS rebuild ms"), ("r_vm_exits", "VM exits"), ("r_exits_io", "I/O exits"),
          ("r_exits_mmio", "MMIO exits"), ("r_cache_resident_kib", "qcow2 caches resident KiB"),
          ("r_cache_allocated_kib", "qcow2 caches allocated KiB"), ("r_l2_misses", "qcow2 L2 misses"),
          ("r_malloc_io_done_kib", "malloc held at io-done KiB"),
          ("r_malloc_in_use_io_done_kib", "malloc in use at io-done KiB")]
# The guest's I/O workloads (boot-bench --io: guest-images/scripts/io-bench), timed inside the guest.
IO = [("randread_iops", "4K random read IOPS"), ("randread_mib_s", "4K random read MiB/s"),
      ("seqread_iops", "64K seq read IOPS"), ("seqread_mib_s", "64K seq read MiB/s"),
      ("workload_s", "init -> io-done s")]
# Per read of each workload, what the guest kernel counted meanwhile over the disks it read (io-bench's dev_ios,
# dev_merges and irqs over its ios; runs recorded before issue 26 have none). Not among the paired ratios.
IO_PER_READ = [("randread_dev_ios_per_io", "4K rand dev reqs/read"),
               ("randread_dev_merges_per_io", "4K rand merges/read"),
               ("randread_irqs_per_io", "4K rand irqs/read"),
               ("seqread_dev_ios_per_io", "64K seq dev reqs/read"),
               ("seqread_dev_merges_per_io", "64K seq merges/read"),
               ("seqread_irqs_per_io", "64K seq irqs/read")]
# The VMM's host CPU per read of each workload (runs.py: CPU_CLASSES), in us.
IO_CPU = [(f"{w}_{k}_us_per_io", f"{label} {what} us/read") for w, label in (("randread", "4K rand"),
                                                                            ("seqread", "64K seq"))
          for k, what in (("cpu", "CPU"), ("vcpu", "vCPUs"), ("iowq", "io_uring wq"), ("vmm", "VMM threads"),
                          ("ended", "ended threads"))]
GATED = [k for k, _ in SEGMENTS if k != "to_init_s"] + [k for k, _ in SETUP]
RATIO_METRICS = ["init_s", "all_disks_s", "exit_s", "beyond_guest_kib", "heap_rss_kib", "malloc_rss_kib"]
IO_RATIO_METRICS = [k for k, _ in IO] + ["peak_rss_kib", "beyond_guest_kib", "heap_rss_kib", "malloc_rss_kib"]
LABELS = dict(TIMES + SEGMENTS + SETUP + MEMORY + REPORT + IO + IO_PER_READ + IO_CPU)


def _minus(a, b):
    return round(a - b, 3) if a is not None and b is not None else None


def segments(f):
    """The phases of one boot from its cumulative times (None where a marker is missing)."""
    return {"setup_s": f["first_kvm_run_s"], "kernel_s": _minus(f["init_s"], f["first_kvm_run_s"]),
            "to_init_s": f["init_s"], "disks_s": _minus(f["all_disks_s"], f["init_s"]),
            "shutdown_s": _minus(f["exit_s"], f["all_disks_s"]), "total_s": f["exit_s"]}


def report_figures(doc):
    """The scalar figures of an mvmm --report document (ms, KiB)."""
    if not doc:
        return {}
    ms = lambda ns: None if ns is None else round(ns / 1e6, 3)
    kib = lambda b: None if b is None else b // 1024
    timeline, memory, trim = doc.get("timeline", {}), doc.get("memory", {}), doc.get("trim", {})
    by_policy = trim.get("by_policy", {})
    spaces = doc.get("address_spaces") or {}
    exits = doc.get("vm_exits") or {}
    caches = doc.get("disk_caches") or {}
    after_disks = memory.get("heap_after_disks") or {}
    io_done = (memory.get("heap_at_marks") or {}).get("io-done") or {}
    # The timeline's events are numbers; its per-device list gives the last device the guest's driver took.
    found = {f"r_{k}_ms": ms(v) for k, v in timeline.items() if not isinstance(v, list)}
    driver_ok = [d["driver_ok"] for d in timeline.get("devices", []) if d.get("driver_ok") is not None]
    found["r_last_driver_ok_ms"] = ms(max(driver_ok)) if driver_ok else None
    steps = ["ram_ready", "devices_ready", "guest_loaded", "first_kvm_run"]
    at = [0] + [timeline.get(k) for k in steps]
    for (key, _), begin, end in zip(SETUP, at, at[1:]):
        found[key] = round((end - begin) / 1e9, 6) if begin is not None and end is not None else None
    found.update({
        "r_exit_code": doc.get("exit", {}).get("code"),
        "r_heap_after_disks_kib": kib(after_disks.get("rss_bytes")),
        "r_heap_exit_kib": kib(memory.get("heap_at_exit", {}).get("rss_bytes")),
        "r_vmm_peak_rss_kib": kib(memory.get("vmm_peak_rss_bytes")),
        "r_trims": by_policy.get("trims"), "r_trim_ms": ms(by_policy.get("time_ns")),
        "r_rcu_batches": doc.get("rcu", {}).get("batches"), "r_rcu_callbacks": doc.get("rcu", {}).get("callbacks"),
        "r_as_rebuilds": sum(s.get("rebuilds", 0) for s in spaces.values()) if spaces else None,
        "r_as_rebuild_ms": ms(sum(s.get("rebuild_ns", 0) for s in spaces.values())) if spaces else None,
        "r_vm_exits": exits.get("total"),
        "r_exits_io": exits.get("by_kind", {}).get("io"), "r_exits_mmio": exits.get("by_kind", {}).get("mmio"),
        "r_cache_resident_kib": kib(caches.get("resident_bytes")),
        "r_cache_allocated_kib": kib(caches.get("allocated_bytes")),
        "r_l2_misses": sum(i["l2"]["misses"] for i in caches["images"]) if caches.get("images") else None,
        # glibc malloc's arenas and mmap'ed blocks, and what of them is in use, as the workload ended
        "r_malloc_io_done_kib": kib(io_done.get("malloc_bytes")),
        "r_malloc_in_use_io_done_kib": kib(io_done.get("malloc_in_use_bytes"))})
    return found


def record(run, config, variant, disks, markers=True, io=False):
    """One boot as a flat dict, with its raw run (lines, memory, --report) kept under "run", so that the figures
    can be derived again from a stored document (rederived). io: the guest ran the I/O workloads."""
    f = run.figures(disks)
    return {"tag": run.tag, "phase": run.phase, "rep": run.rep, "config": config, "variant": variant.name,
            "vmm": variant.vmm, "build": variant.build, "policy": variant.policy, "alloc": variant.alloc,
            "cache_alloc": variant.cache_alloc, "aio": variant.aio, "code": run.code, "expected_disks": disks,
            "markers": markers,
            "io": io, "problems": run.problems(disks, markers, io), **f, **segments(f),
            "workload_s": _minus(f["io_done_s"], f["init_s"]), **report_figures(run.report), "run": asdict(run)}


def rederived(stored):
    """A stored record's figures computed again from its raw run (this version's definitions)."""
    fields = Run.__dataclass_fields__
    run = Run(**{k: v for k, v in stored["run"].items() if k in fields})
    run.lines = [tuple(line) for line in run.lines]
    variant = Variant(stored["variant"], stored["vmm"], stored["build"], stored["policy"], stored.get("alloc"),
                      stored.get("cache_alloc"), stored.get("aio"))
    return record(run, stored["config"], variant, stored["expected_disks"], stored["markers"], stored.get("io"))


def measured(records):
    """The records that count: measured rounds (not warm-up) of complete boots."""
    return [r for r in records if r["phase"] == "r" and not r["problems"]]


def names(records, key):
    """Distinct values of `key` in the order they first appear (QEMU's variants last among variants)."""
    found = list(dict.fromkeys(r[key] for r in records))
    return [n for n in found if not is_qemu(n)] + [n for n in found if is_qemu(n)]


def is_qemu(variant):
    return variant == "qemu" or variant.startswith("qemu-")


def summarize(records):
    """{config: {variant: {"complete": n, "metrics": {metric: {median, min, max, n}}}}}."""
    good = measured(records)
    summary = {}
    for config in names(records, "config"):
        summary[config] = {}
        for variant in names([r for r in records if r["config"] == config], "variant"):
            mine = [r for r in good if r["config"] == config and r["variant"] == variant]
            metrics = {}
            for key, _ in TIMES + SEGMENTS + SETUP + MEMORY + REPORT + IO + IO_PER_READ + IO_CPU:
                values = [r[key] for r in mine if isinstance(r.get(key), (int, float))]
                if values:
                    metrics[key] = {"median": statistics.median(values), "min": min(values), "max": max(values),
                                    "n": len(values)}
            summary[config][variant] = {"complete": len(mine), "metrics": metrics}
    return summary


def rounds(records):
    """{(config, rep): {variant: record}} of the measured, complete boots."""
    found = {}
    for r in measured(records):
        found.setdefault((r["config"], r["rep"]), {})[r["variant"]] = r
    return found


def ratio_pairs(variant_names):
    """[(subject, reference)]: every mvmm variant against QEMU (and those with aio=io_uring against QEMU's
    io_uring too), and build B against build A per policy."""
    pairs = [(v, "qemu") for v in variant_names if not is_qemu(v) and "qemu" in variant_names]
    pairs += [(v, "qemu-io_uring") for v in variant_names
              if "-io_uring" in v and not is_qemu(v) and "qemu-io_uring" in variant_names]
    pairs += [(v, "mvmm-a" + v[len("mvmm-b"):]) for v in variant_names
              if v.startswith("mvmm-b") and "mvmm-a" + v[len("mvmm-b"):] in variant_names]
    return pairs


def paired_sets(records, pairs, metrics):
    """The rounds' (subject, reference) values per configuration, pair and metric, where any round has both."""
    by_round = rounds(records)
    for config in names(records, "config"):
        for subject, reference in pairs:
            for metric in metrics:
                values = [(v[subject].get(metric), v[reference].get(metric)) for (c, _), v in sorted(by_round.items())
                          if c == config and subject in v and reference in v]
                if any(a and b for a, b in values):
                    yield {"config": config, "subject": subject, "reference": reference, "metric": metric,
                           "kind": "paired", "pairs": values}


def format_sets(records, metrics):
    """qcow2 against raw (boot-bench --disk-format raw,qcow2): each variant's figures on qcow2 overlays and on raw
    disks in the same round, from the two configurations that differ only by the disks' format."""
    by_round = rounds(records)
    for config in names(records, "config"):
        parts = config.split(", ")
        if "qcow2" not in parts:
            continue
        raw = ", ".join("raw" if p == "qcow2" else p for p in parts)
        for variant in names([r for r in records if r["config"] == config], "variant"):
            for metric in metrics:
                values = [(v[variant].get(metric), by_round[(raw, rep)][variant].get(metric))
                          for (c, rep), v in sorted(by_round.items())
                          if c == config and variant in v and variant in by_round.get((raw, rep), {})]
                if any(a and b for a, b in values):
                    yield {"config": config, "subject": f"{variant} qcow2", "reference": f"{variant} raw",
                           "metric": metric, "kind": "paired", "pairs": values}


def normalized(records, variant, config, metric, by="qemu"):
    """A variant's metric per round, divided by QEMU's total time in the same round (a yardstick for the test
    host's speed that cancels between runs); absolute values when `by` is None."""
    found = []
    for (c, _), v in sorted(rounds(records).items()):
        if c != config or variant not in v or v[variant].get(metric) is None:
            continue
        if by is None:
            found.append(v[variant][metric])
        elif by in v and v[by].get("total_s"):
            found.append(v[variant][metric] / v[by]["total_s"])
    return found


def baseline_sets(records, baseline, metrics):
    """Each mvmm variant of this run against the same variant and configuration of a baseline run (unpaired:
    different test host boots), normalized by QEMU when both runs have it."""
    with_qemu = "qemu" in names(records, "variant") and "qemu" in names(baseline, "variant")
    by = "qemu" if with_qemu else None
    for config in names(records, "config"):
        for variant in names([r for r in records if r["config"] == config], "variant"):
            for metric in metrics if variant != "qemu" else []:
                mine = stats.positive(normalized(records, variant, config, metric, by))
                theirs = stats.positive(normalized(baseline, variant, config, metric, by))
                if mine and theirs:
                    yield {"config": config, "subject": variant, "reference": "baseline", "metric": metric,
                           "kind": "unpaired", "normalized_by": by, "values": (mine, theirs)}


def estimated(sets, level=stats.LEVEL):
    """The comparisons with their ratio estimates (the raw values left out)."""
    found = []
    for s in sets:
        if s["kind"] == "paired":
            estimate = stats.paired_ratio(s["pairs"], level)
        else:
            estimate = stats.unpaired_ratio(*s["values"], level)
        found.append({**{k: v for k, v in s.items() if k not in ("pairs", "values")}, **estimate.as_dict()})
    return found


def ratios(records):
    """mvmm/QEMU, B/A and qcow2/raw paired ratios of the times and memory figures (of the I/O rates and memory
    when the guest ran the I/O workloads), at the default level."""
    metrics = IO_RATIO_METRICS if any(r.get("io") for r in records) else RATIO_METRICS + GATED
    return estimated([*paired_sets(records, ratio_pairs(names(records, "variant")), metrics),
                      *format_sets(records, metrics)])


def gate(records, threshold, baseline=None):
    """The regression gate: build B against build A (when both ran) and every mvmm variant against the baseline
    run (when given), on each phase in GATED; each comparison's one-sided lower bound (stats.py) is taken at the
    Bonferroni confidence for their number. Returns {"threshold", "confidence", "comparisons", "regressions"}."""
    pairs = [p for p in ratio_pairs(names(records, "variant")) if p[1] != "qemu"]
    sets = list(paired_sets(records, pairs, GATED))
    sets += list(baseline_sets(records, baseline, GATED)) if baseline else []
    confidence = stats.gate_confidence(len(sets))
    found = estimated(sets)
    for s, c in zip(sets, found):
        if s["kind"] == "paired":
            bound = stats.paired_lower_bound(s["pairs"], confidence)
        else:
            bound = stats.unpaired_lower_bound(*s["values"], confidence)
        c["bound"] = round(bound, 4)
        c["regression"] = stats.regressed(c["point"], bound, threshold)
    return {"threshold": threshold, "confidence": round(confidence, 5), "comparisons": found,
            "regressions": [c for c in found if c["regression"]]}


def csv_text(records):
    """One row per boot: every scalar field (the raw run and its --report document stay in the JSON)."""
    columns = []
    for r in records:
        columns += [k for k, v in r.items() if k not in columns and not isinstance(v, dict)]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in records:
        writer.writerow({k: "; ".join(v) if isinstance(v, list) else v for k, v in r.items() if k in columns})
    return out.getvalue()
