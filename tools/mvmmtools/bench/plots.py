"""Boot-bench's plots (Debian's python3-matplotlib, installed by tools/setup), one file each in the output folder:
- phases.FMT: the boot's phases as stacked bars (medians), a bar per configuration and variant;
- memory.FMT: peak RSS beyond guest RAM and heap Rss at the poweroff marker, mvmm and QEMU side by side;
- trim.FMT: mvmm's heap Rss after the disks and at exit, and its total trim time, per variant (trim policy);
- io.FMT (--io): the guest's 4 KiB random read IOPS and 64 KiB sequential read MiB/s per variant;
- ratios.FMT: the paired ratios (mvmm/QEMU, B/A) with their confidence intervals, per configuration."""

from mvmmtools.bench.results import IO_RATIO_METRICS, LABELS, RATIO_METRICS

PHASES = [("setup_s", "exec -> first KVM_RUN"), ("kernel_s", "first KVM_RUN -> init"),
          ("disks_s", "init -> all disks"), ("shutdown_s", "all disks -> exit")]
QEMU_PHASES = [("to_init_s", "exec -> init (QEMU)"), ("disks_s", None), ("shutdown_s", None)]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _median(summary, config, variant, key):
    stat = summary[config][variant]["metrics"].get(key)
    return stat["median"] if stat else 0


def _bars(summary):
    return [(c, v) for c in summary for v in summary[c] if summary[c][v]["complete"]]


def phases(plt, summary):
    bars = _bars(summary)
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(bars)))
    labels = [f"{c} | {v}" for c, v in bars]
    colors = {}
    for i, (config, variant) in enumerate(bars):
        left = 0
        for key, name in (QEMU_PHASES if variant == "qemu" else PHASES):
            width = _median(summary, config, variant, key)
            name = name or dict(PHASES)[key]
            color = colors.setdefault(name, f"C{len(colors)}")
            ax.barh(i, width, left=left, color=color, label=name if name not in ax.get_legend_handles_labels()[1]
                    else None)
            left += width
    ax.set_yticks(range(len(bars)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("s from exec (median)")
    ax.set_title("Boot phases")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return fig


def _grouped(ax, summary, bars, series, scale=1.0):
    """Bars of each (key, legend) in series side by side, one group per (configuration, variant)."""
    height = 0.8 / len(series)
    for n, (key, name) in enumerate(series):
        offset = (n - (len(series) - 1) / 2) * height
        ax.barh([i + offset for i in range(len(bars))], [_median(summary, c, v, key) / scale for c, v in bars],
                height=height, label=name)
    ax.set_yticks(range(len(bars)), [f"{c} | {v}" for c, v in bars])
    ax.invert_yaxis()
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")


def memory(plt, summary):
    bars = _bars(summary)
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(bars)))
    _grouped(ax, summary, bars, [("beyond_guest_kib", "peak RSS beyond guest RAM"),
                                 ("heap_rss_kib", "heap Rss at poweroff")], 1024)
    ax.set_xlabel("MiB (median)")
    ax.set_title("Memory, mvmm and QEMU read the same way (/proc/<pid> at the poweroff marker)")
    return fig


def _panels(plt, summary, bars, size, title, panels, sharey=False):
    """A figure of panels side by side, each (series, scale, x label) as _grouped bars; size = (width, height per
    bar)."""
    fig, axes = plt.subplots(1, len(panels), figsize=(size[0], 1.2 + size[1] * len(bars)), sharey=sharey)
    for ax, (series, scale, xlabel) in zip(axes, panels):
        _grouped(ax, summary, bars, series, scale)
        ax.set_xlabel(xlabel)
    fig.suptitle(title)
    return fig


def trim(plt, summary):
    bars = [(c, v) for c, v in _bars(summary) if v != "qemu"]
    if not bars:
        return None
    return _panels(plt, summary, bars, (11, 0.5), "Heap and trimming per trim policy",
                   [([("r_heap_after_disks_kib", "after the disks"), ("r_heap_exit_kib", "at exit")], 1024,
                     "heap Rss, MiB (mvmm --report)"),
                    ([("r_trim_ms", "all trims")], 1.0, "total malloc_trim time, ms")], sharey=True)


def io(plt, summary):
    bars = [(c, v) for c, v in _bars(summary) if "randread_iops" in summary[c][v]["metrics"]]
    if not bars:
        return None
    return _panels(plt, summary, bars, (12, 0.4), "Reads in the guest (O_DIRECT)",  # each inverts its own y axis
                   [([("randread_iops", "4 KiB random, every disk")], 1.0, "IOPS (median)"),
                    ([("seqread_mib_s", "64 KiB sequential, depth 32")], 1.0, "MiB/s (median)")])


def ratios(plt, comparisons):
    comparisons = [c for c in comparisons if c["metric"] in RATIO_METRICS + IO_RATIO_METRICS]
    if not comparisons:
        return None
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.3 * len(comparisons)))
    labels = [f"{c['config']} | {c['subject']}/{c['reference']} {LABELS.get(c['metric'], c['metric'])}"
              for c in comparisons]
    points = [c["point"] for c in comparisons]
    errors = [[c["point"] - c["lo"] for c in comparisons], [c["hi"] - c["point"] for c in comparisons]]
    ax.errorbar(points, range(len(comparisons)), xerr=errors, fmt="o", capsize=3)
    ax.axvline(1, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(range(len(comparisons)), labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("ratio, log scale (geometric mean over paired rounds, 95% bootstrap interval)")
    ax.set_title("Paired ratios")
    return fig


def write_all(doc, folder, fmt="png"):
    """Writes the plots; returns the files written, or a sentence why none were."""
    plt = _pyplot()
    if plt is None:
        return "no plots: python3-matplotlib is not installed (tools/setup installs it)"
    figures = {"phases": phases(plt, doc["summary"]), "memory": memory(plt, doc["summary"]),
               "trim": trim(plt, doc["summary"]), "io": io(plt, doc["summary"]), "ratios": ratios(plt, doc["ratios"])}
    written = []
    for name, fig in figures.items():
        if fig is None:
            continue
        path = folder / f"{name}.{fmt}"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
