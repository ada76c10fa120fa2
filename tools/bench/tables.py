"""Boot-bench's text report: per configuration the medians [min-max] of every variant, the paired ratios with
their confidence intervals, and the gate's verdict."""

from results import LABELS, MEMORY, REPORT, SEGMENTS, SETUP, TIMES

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


def config_tables(config, variants, reps):
    """The tables of one configuration, a column per variant: times and phases (s), memory (MiB), mvmm's
    report figures."""
    names = list(variants)
    header = [config] + [v + ("" if variants[v]["complete"] == reps else f" [{variants[v]['complete']}/{reps} ok]")
                         for v in names]
    m = lambda v, k: variants[v]["metrics"].get(k)
    out = []
    for title, keys, scale, digits in (
            ("s from exec, median [min-max]", TIMES, 1, 2), ("phases, s", SEGMENTS, 1, 2),
            ("mvmm set-up from its --report, s", SETUP, 1, 3),
            ("MiB at the poweroff marker (VmHWM, largest mapping = guest RAM, [heap] from smaps)", MEMORY,
             KIB_PER_MIB, 1),
            ("mvmm --report", REPORT, 1, 1)):
        rows = [[h] + [cell(m(v, k), scale, digits) for v in names] for k, h in keys if any(m(v, k) for v in names)]
        if rows:
            out += ["", table(title, header, rows)]
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
               f"(Student's t on the log ratios, Bonferroni over {len(gate['comparisons'])} comparisons) is above "
               "1; [95% bootstrap interval]"]
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
    for name, variants in summary.items():
        out += config_tables(name, variants, config["reps"])
    if doc["ratios"]:
        out += ["", "paired ratios, geometric mean [95% bootstrap interval] over the rounds (< 1: subject faster "
                    "or smaller)"] + ratio_lines(doc["ratios"])
    out += gate_lines(doc.get("gate"))
    if doc["problems"]:
        out += ["", "not counted / problems:"] + [f"  {n}" for n in doc["problems"]]
    complete = sum(1 for r in doc["records"] if not r["problems"])
    out += ["", f"{complete}/{len(doc['records'])} boots complete, {config['wall_s']} s wall time in all"]
    return "\n".join(out)
