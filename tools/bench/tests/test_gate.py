"""The regression gate (results.gate, stats.py): it catches a 10% slowdown on a quiet machine and a 200 ms
sleep before the first KVM_RUN in the noise our test host really has, and two identical builds never fail,
neither on quiet data nor over 20 simulated runs drawn from recorded rounds (tests/data/noise-*.json)."""

import random
import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import results  # noqa: E402
import stats  # noqa: E402
from noise import load, runs  # noqa: E402

THRESHOLD = 0.05
NOISE = "noise-1disk-ab.json"  # identical builds A and B, with QEMU, 1 disk: real rounds of one test host boot
RUNS = 20
# A quiet machine's phases, s (their sizes as our test host has them).
PHASES = {"setup_s": 3.0, "kernel_s": 25.0, "disks_s": 4.0, "shutdown_s": 1.2, "r_ram_s": 1.0,
          "r_devices_s": 0.06, "r_load_s": 1.3, "r_start_s": 0.02}


def quiet_run(rounds, rng, slowdown=1.0, spread=0.02, drift=(0.8, 1.25)):
    """A/B rounds where the machine's speed drifts between rounds (both builds alike: `drift`) and each boot has
    `spread` lognormal jitter; build B is `slowdown` times slower in every phase."""
    records = []
    for rep in range(1, rounds + 1):
        speed = rng.uniform(*drift)
        for variant, factor in (("mvmm-a", 1.0), ("mvmm-b", slowdown)):
            r = {"config": "1 disk", "rep": rep, "phase": "r", "variant": variant, "problems": []}
            r.update({k: v * speed * factor * rng.lognormvariate(0, spread) for k, v in PHASES.items()})
            r["total_s"] = r["setup_s"] + r["kernel_s"] + r["disks_s"] + r["shutdown_s"]
            records.append(r)
    return records


def regressions(gate):
    return sorted({c["metric"] for c in gate["regressions"]})


def sleep_before_first_kvm_run(records, variant="mvmm-b", seconds=0.2):
    """Build B waits `seconds` before its first KVM_RUN: that step, the exec -> KVM_RUN phase and the total grow."""
    return [dict(r, **{k: r[k] + seconds for k in ("r_start_s", "setup_s", "total_s")})
            if r["variant"] == variant else r for r in records]


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


class RecordedNoise(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.source, cls.rounds = load(NOISE)
        cls.reps = len(cls.rounds)

    def test_the_noise_is_real(self):
        # Without the lower bound, the threshold alone would fail identical builds in most runs.
        failing = sum(1 for records in runs(self.rounds, self.reps, RUNS, seed=1)
                      if any(c["point"] > 1 + THRESHOLD for c in results.gate(records, THRESHOLD)["comparisons"]))
        self.assertGreater(failing, RUNS // 2, self.source)

    def test_identical_builds_never_fail(self):
        for i, records in enumerate(runs(self.rounds, self.reps, RUNS, seed=1)):
            gate = results.gate(records, THRESHOLD)
            self.assertEqual(regressions(gate), [], f"simulated run {i} of {self.source}")

    def test_200_ms_before_the_first_kvm_run_fails_on_that_phase(self):
        for i, records in enumerate(runs(self.rounds, self.reps, RUNS, seed=2)):
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
