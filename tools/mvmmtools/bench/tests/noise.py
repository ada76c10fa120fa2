"""Recorded noise for the gate's tests: the records of real boot-bench runs, trimmed to what the figures need,
simulated runs drawn from them, and boots made slower before their first KVM_RUN.

  PYTHONPATH=tools python3 -m mvmmtools.bench.tests.noise trim BOOT-BENCH.JSON "how it was run" > \
      tools/mvmmtools/bench/tests/data/NAME.json
  PYTHONPATH=tools python3 -m mvmmtools.bench.tests.noise repeat BOOT-BENCH.JSON ROUNDS > STEADY.json
  PYTHONPATH=tools python3 -m mvmmtools.bench.tests.noise delay BOOT-BENCH.JSON VARIANT SECONDS > SLOWER.json

trim keeps every complete record with its raw run (the lines the times come from, the memory, the --report's
timeline and figures; not the guest's module markers or the report's marks), so the tests derive the figures
again with today's definitions (results.rederived). repeat writes a boot-bench document again with its first
measured round as ROUNDS identical rounds (a gate that must decide without noise: fewer than 3 rounds never
decide), delay with VARIANT's boots as if the VMM had slept SECONDS just before its first KVM_RUN
(tools/boot-bench --report FILE derives everything again from the raw runs)."""

import json
import random
import sys
from pathlib import Path

from mvmmtools.bench import results

KEPT_LINES = ("first KVM_RUN", "MVMM-MARK init", "MVMM-MARK disk", "MVMM-MARK cpus", "MVMM-MARK poweroff")
DATA = Path(__file__).resolve().parent / "data"


def trimmed(record):
    run = dict(record["run"])
    run["lines"] = [line for line in run["lines"] if any(k in line[1] for k in KEPT_LINES)]
    if run.get("report"):
        run["report"] = {k: v for k, v in run["report"].items() if k not in ("marks",)}
    return {k: v for k, v in record.items() if k in ("tag", "phase", "rep", "config", "variant", "vmm", "build",
                                                     "policy", "expected_disks", "markers")} | {"run": run}


def load(name):
    """(source, [rounds]) of a fixture: each round {variant: record} of the complete boots."""
    doc = json.loads((DATA / name).read_text())
    records = [results.rederived(r) for r in doc["records"]]
    by_round = results.rounds(records)
    return doc["source"], [by_round[k] for k in sorted(by_round)]


def relabelled(boot, rep, variant=None, build=None):
    """A boot's record (its raw run too, so that it can be derived again) as round `rep`, and as `variant` of
    `build` when given."""
    named = {"variant": variant, "build": build} if variant else {}
    run = dict(boot["run"], rep=rep, **({"variant": variant} if variant else {}))
    return dict(boot, rep=rep, **named, run=run)


def simulated(rounds, reps, rng):
    """The records of a run of `reps` rounds of the identical builds A and B (mvmm-a, mvmm-b), drawn from the
    recorded rounds of two identical builds:
    - `reps` of the recorded rounds, drawn without replacement, each keeping its two boots paired: they ran
      next to each other in the same test host boot, and the gate pairs them for that reason;
    - in each round, the labels A and B swapped with probability 1/2.
    Under identical builds which boot of a round is called A is arbitrary, so each of these runs is as likely as
    the recorded one: any set of recorded rounds is a run that could have happened (rounds differ by the test
    host's drift, which the pairing cancels), and a swap turns a round's ratio r into 1/r, so the runs' point
    estimates differ as those of real runs do. (The same boots in another order or pairing would not: a geometric
    mean depends on neither.) Runs share rounds, so they are not independent: the share of them that fail
    estimates the gate's false-alarm rate with `reps` rounds, without the spread of truly independent runs. Not
    drawn WITH replacement: a run repeating a round looks steadier than it is (Student's t counts the copies as
    independent rounds), so identical builds would fail more often than in any real run."""
    chosen = rng.sample(rounds, reps)
    records = []
    for rep, r in enumerate(chosen, 1):
        a, b = (r["mvmm-b"], r["mvmm-a"]) if rng.random() < 0.5 else (r["mvmm-a"], r["mvmm-b"])
        records += [relabelled(a, rep, "mvmm-a", "a"), relabelled(b, rep, "mvmm-b", "b")]
    return records


def runs(rounds, reps, count, seed):
    rng = random.Random(seed)
    return [simulated(rounds, reps, rng) for _ in range(count)]


def repeated(records, total):
    """The records of the first measured round as `total` identical rounds (the others left out): rounds with no
    noise at all."""
    first = [r for r in records if r["phase"] == "r" and r["rep"] == 1]
    return [relabelled(r, rep) for rep in range(1, total + 1) for r in first]


def delayed(record, seconds):
    """The record (derived again) of the same boot with a VMM that slept `seconds` just before its first
    KVM_RUN: that line and every later one, the exit, and the --report's timeline from first_kvm_run on (and
    its marks and devices) come `seconds` later."""
    run = dict(record["run"])
    first = next(i for i, (_, text) in enumerate(run["lines"]) if "first KVM_RUN" in text)
    run["lines"] = [(t + seconds, text) if i >= first else (t, text) for i, (t, text) in enumerate(run["lines"])]
    run["end"] += seconds
    if run.get("report"):
        ns, start = round(seconds * 1e9), run["report"]["timeline"]["first_kvm_run"]
        later = lambda t: t is not None and t >= start
        report = dict(run["report"])
        shifted = lambda t: t + ns if later(t) else t
        timeline = {k: shifted(t) for k, t in report["timeline"].items() if k != "devices"}
        if "devices" in report["timeline"]:
            timeline["devices"] = [dict(d, driver_ok=shifted(d.get("driver_ok")), first_notify=shifted(d.get(
                "first_notify"))) for d in report["timeline"]["devices"]]
        report["timeline"] = timeline
        if "marks" in report:
            report["marks"] = [dict(m, t=m["t"] + ns) if later(m.get("t")) else m for m in report["marks"]]
        run["report"] = report
    return results.rederived(dict(record, run=run))


if __name__ == "__main__":
    command, doc = sys.argv[1], json.loads(Path(sys.argv[2]).read_text())
    if command == "trim":
        doc = {"source": sys.argv[3], "records": [trimmed(r) for r in doc["records"] if not r["problems"]]}
    elif command == "repeat":
        doc["records"] = repeated(doc["records"], int(sys.argv[3]))
        doc["config"]["reps"] = int(sys.argv[3])
    elif command == "delay":
        doc["records"] = [delayed(r, float(sys.argv[4])) if r["variant"] == sys.argv[3] else r
                          for r in doc["records"]]
    else:
        sys.exit(__doc__)
    json.dump(doc, sys.stdout, separators=(",", ":"))
    print()
