"""Recorded noise for the gate's tests: the records of real boot-bench runs, trimmed to what the figures need,
and simulated runs drawn from them.

  python3 tools/bench/tests/noise.py BOOT-BENCH.JSON "how it was run" > tools/bench/tests/data/NAME.json

keeps every record with its raw run (the lines the times come from, the memory, the --report's timeline and
figures; not the guest's module markers or the report's marks), so the tests derive the figures again with
today's definitions (results.rederived)."""

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import results  # noqa: E402

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


def simulated(rounds, reps, rng):
    """The records of a run of `reps` rounds of the identical builds A and B: the A boots and the B boots each
    drawn without replacement from the recorded ones, and paired at random. Under identical builds every
    recorded boot is a sample of the same noise; pairing across rounds adds the drift between rounds, so the
    gate sees as much noise as in a real run or more, never less."""
    a_boots = rng.sample([r["mvmm-a"] for r in rounds], reps)
    b_boots = rng.sample([r["mvmm-b"] for r in rounds], reps)
    return [dict(boot, rep=rep) for rep, pair in enumerate(zip(a_boots, b_boots), 1) for boot in pair]


def runs(rounds, reps, count, seed):
    rng = random.Random(seed)
    return [simulated(rounds, reps, rng) for _ in range(count)]


if __name__ == "__main__":
    doc = json.loads(Path(sys.argv[1]).read_text())
    json.dump({"source": sys.argv[2], "records": [trimmed(r) for r in doc["records"] if not r["problems"]]},
              sys.stdout, separators=(",", ":"))
    print()
