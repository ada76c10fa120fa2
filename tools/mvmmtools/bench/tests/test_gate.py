"""The regression gate (results.gate, stats.py): it catches a 10% slowdown on a quiet machine and a 200 ms
sleep before the first KVM_RUN in the noise our test host really has; two identical builds never fail on quiet
data, and fail in at most 5% of 40 simulated runs drawn from recorded rounds (tests/data/noise-*.json), though the
threshold alone would fail most of them. Against a --baseline run, QEMU's time in each round cancels a slower or
drifting test host."""

import random
import unittest

from mvmmtools.bench import results, stats
from mvmmtools.bench.tests.noise import delayed, load, runs

THRESHOLD = 0.05
NOISE = "noise-1disk-ab16.json"  # identical builds A and B, with QEMU, 1 disk: 16 real rounds, 2 test host boots
REPS = 5  # rounds of a simulated run, as boot-bench's default --reps
RUNS = 40
ALPHA = 1 - stats.LEVEL
# A quiet machine's phases, s (their sizes as our test host has them).
PHASES = {"setup_s": 3.0, "kernel_s": 25.0, "disks_s": 4.0, "shutdown_s": 1.2, "r_ram_s": 1.0,
          "r_devices_s": 0.06, "r_load_s": 1.3, "r_start_s": 0.02}


def quiet_run(rounds, rng, slowdown=1.0, spread=0.02, drift=(0.8, 1.25), factors=None):
    """A/B rounds where the machine's speed drifts between rounds (both builds alike: `drift`) and each boot has
    `spread` lognormal jitter; build B is `slowdown` times slower in every phase. factors = {variant: factor}:
    these variants instead, each that many times slower."""
    records = []
    for rep in range(1, rounds + 1):
        speed = rng.uniform(*drift)
        for variant, factor in (factors or {"mvmm-a": 1.0, "mvmm-b": slowdown}).items():
            r = {"config": "1 disk", "rep": rep, "phase": "r", "variant": variant, "problems": []}
            r.update({k: v * speed * factor * rng.lognormvariate(0, spread) for k, v in PHASES.items()})
            r["total_s"] = r["setup_s"] + r["kernel_s"] + r["disks_s"] + r["shutdown_s"]
            records.append(r)
    return records


def regressions(gate):
    return sorted({c["metric"] for c in gate["regressions"]})


def sleep_before_first_kvm_run(records, variant="mvmm-b", seconds=0.2):
    """Build B sleeps `seconds` before its first KVM_RUN (its recorded boots' raw times shifted, noise.delayed)."""
    return [delayed(r, seconds) if r["variant"] == variant else r for r in records]


class Delayed(unittest.TestCase):
    def test_a_delay_shifts_the_reports_devices_after_the_first_kvm_run(self):
        _, rounds = load(NOISE)
        record = next(r for r in rounds[0].values() if r["run"].get("report"))
        report = record["run"]["report"]
        start = report["timeline"]["first_kvm_run"]
        report["timeline"]["devices"] = [{"name": "disk 0", "driver_ok": start + 5, "first_notify": None}]
        shifted = delayed(record, 0.2)["run"]["report"]["timeline"]
        self.assertEqual(shifted["first_kvm_run"], start + 200_000_000)
        self.assertEqual(shifted["devices"], [{"name": "disk 0", "driver_ok": start + 200_000_005,
                                               "first_notify": None}])


class QuietMachine(unittest.TestCase):
    def test_a_10_percent_slowdown_is_caught_in_every_phase(self):
        gate = results.gate(quiet_run(5, random.Random(1), slowdown=1.10), THRESHOLD)
        self.assertEqual(regressions(gate), sorted(results.GATED))
        self.assertEqual(len(gate["comparisons"]), len(results.GATED))

    def test_a_real_slowdown_below_the_threshold_passes(self):
        gate = results.gate(quiet_run(8, random.Random(2), slowdown=1.03, spread=0.01), THRESHOLD)
        self.assertEqual(regressions(gate), [])
        self.assertTrue(all(c["bound"] > 1 for c in gate["comparisons"]))  # real, outside the noise, but small

    def test_identical_builds_pass(self):
        for seed in range(RUNS):
            self.assertEqual(regressions(results.gate(quiet_run(5, random.Random(seed)), THRESHOLD)), [], seed)

    def test_a_slower_build_against_a_baseline_run(self):
        # Unpaired: nothing cancels a drift between the two runs, so only a steady machine can tell 10%.
        rng, steady = random.Random(3), (0.99, 1.01)
        one_build = lambda slowdown=1.0: [dict(r, variant="mvmm-a") for r in
                                          quiet_run(5, rng, slowdown, drift=steady) if r["variant"] == "mvmm-b"]
        baseline, slower, same = one_build(), one_build(1.10), one_build()
        self.assertEqual(regressions(results.gate(slower, THRESHOLD, baseline)), sorted(results.GATED))
        self.assertEqual(regressions(results.gate(same, THRESHOLD, baseline)), [])


def with_qemu(rng, mvmm=1.0, host=1.0, drift=(0.5, 2.0)):
    """mvmm and QEMU rounds on a test host `host` times slower, drifting by up to 4x between rounds; mvmm `mvmm`
    times slower."""
    return quiet_run(5, rng, spread=0.01, drift=drift, factors={"mvmm": host * mvmm, "qemu": host})


class BaselineNormalization(unittest.TestCase):
    """--baseline: each mvmm variant against an earlier run, divided by QEMU's total time in the same round when
    both runs have QEMU, so that a test host that is slower as a whole, or drifts from round to round, cancels."""

    def test_by_qemu_total_time_in_the_same_round(self):
        records = with_qemu(random.Random(5))
        mvmm = [r for r in records if r["variant"] == "mvmm"]
        qemu = [r for r in records if r["variant"] == "qemu"]
        self.assertEqual(results.normalized(records, "mvmm", "1 disk", "setup_s"),
                         [m["setup_s"] / q["total_s"] for m, q in zip(mvmm, qemu)])
        self.assertEqual(results.normalized(records, "mvmm", "1 disk", "setup_s", by=None),
                         [m["setup_s"] for m in mvmm])

    def test_a_slower_test_host_cancels(self):
        rng, steady = random.Random(6), (0.98, 1.02)
        baseline = with_qemu(rng, drift=steady)
        gate = results.gate(with_qemu(rng, host=2.0, drift=steady), THRESHOLD, baseline)
        self.assertEqual(regressions(gate), [])
        self.assertEqual({c["normalized_by"] for c in gate["comparisons"]}, {"qemu"})
        self.assertEqual(len(gate["comparisons"]), len(results.GATED))
        # Without QEMU in one of the runs, absolute times are compared: the slower host is all that shows.
        without_qemu = [r for r in baseline if r["variant"] != "qemu"]
        gate = results.gate(with_qemu(rng, host=2.0, drift=steady), THRESHOLD, without_qemu)
        self.assertEqual({c["normalized_by"] for c in gate["comparisons"]}, {None})
        self.assertEqual(regressions(gate), sorted(results.GATED))

    def test_a_slower_build_is_caught_through_the_drift(self):
        rng = random.Random(7)
        baseline = with_qemu(rng)
        self.assertEqual(regressions(results.gate(with_qemu(rng, mvmm=1.10, host=1.5), THRESHOLD, baseline)),
                         sorted(results.GATED))
        self.assertEqual(regressions(results.gate(with_qemu(rng, host=1.5), THRESHOLD, baseline)), [])


class RecordedNoise(unittest.TestCase):
    """Simulated runs of REPS rounds of two identical builds, drawn from recorded rounds (noise.simulated says
    how and why that is honest). A gate at ALPHA fails identical builds in up to ALPHA of all runs by design:
    the share of simulated runs that fail is held to that."""

    @classmethod
    def setUpClass(cls):
        cls.source, cls.rounds = load(NOISE)
        cls.runs = runs(cls.rounds, REPS, RUNS, seed=1)
        cls.gates = [results.gate(records, THRESHOLD) for records in cls.runs]

    def test_the_simulated_runs_differ(self):
        totals = {next(c["point"] for c in gate["comparisons"] if c["metric"] == "total_s") for gate in self.gates}
        self.assertEqual(len(totals), RUNS, self.source)

    def test_the_noise_is_real(self):
        # Without the lower bound, the threshold alone would fail identical builds in most runs.
        failing = sum(1 for gate in self.gates if any(c["point"] > 1 + THRESHOLD for c in gate["comparisons"]))
        self.assertGreater(failing, RUNS // 2, self.source)

    def test_identical_builds_fail_in_at_most_alpha_of_the_runs(self):
        failing = {i: regressions(gate) for i, gate in enumerate(self.gates) if gate["regressions"]}
        self.assertLessEqual(len(failing), ALPHA * RUNS, f"simulated runs of {self.source}: {failing}")

    def test_200_ms_before_the_first_kvm_run_fails_on_that_phase(self):
        for i, records in enumerate(self.runs):
            gate = results.gate(sleep_before_first_kvm_run(records), THRESHOLD)
            self.assertIn("r_start_s", regressions(gate), f"simulated run {i} of {self.source}")

    def test_fewer_than_three_rounds_never_decide(self):
        records = sleep_before_first_kvm_run(runs(self.rounds, 2, 1, seed=3)[0])
        self.assertEqual(regressions(results.gate(records, THRESHOLD)), [])


class Bounds(unittest.TestCase):
    def test_student_t_quantiles(self):
        for q, df, t in ((0.975, 1, 12.7062), (0.975, 4, 2.7764), (0.95, 10, 1.8125), (0.999, 2, 22.3271)):
            self.assertAlmostEqual(stats.t_quantile(q, df), t, 3)

    def test_paired_bound_of_a_steady_ratio(self):
        pairs = [(1.2 * x, x) for x in (5, 6, 7, 8)]
        self.assertAlmostEqual(stats.paired_lower_bound(pairs, 0.99), 1.2)
        self.assertEqual(stats.paired_lower_bound(pairs[:2], 0.99), 0.0)

    def test_unpaired_bound_widens_with_the_noise(self):
        rng = random.Random(4)
        quiet = stats.unpaired_lower_bound([1.2 * rng.uniform(0.99, 1.01) for _ in range(5)],
                                           [rng.uniform(0.99, 1.01) for _ in range(5)], 0.99)
        noisy = stats.unpaired_lower_bound([1.2 * rng.uniform(0.7, 1.4) for _ in range(5)],
                                           [rng.uniform(0.7, 1.4) for _ in range(5)], 0.99)
        self.assertGreater(quiet, 1.1)
        self.assertLess(noisy, 1.0)


if __name__ == "__main__":
    unittest.main()
