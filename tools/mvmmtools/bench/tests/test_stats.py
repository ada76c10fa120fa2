"""mvmmtools.bench.stats: ratios, bootstrap intervals and the gate's rule."""

import random
import unittest

from mvmmtools.bench import stats


class Ratios(unittest.TestCase):
    def test_paired_ratio_is_the_geometric_mean_of_round_ratios(self):
        e = stats.paired_ratio([(2.0, 1.0), (0.5, 1.0), (1.0, 1.0)])
        self.assertAlmostEqual(e.point, 1.0)
        self.assertLessEqual(e.lo, 1.0)
        self.assertGreaterEqual(e.hi, 1.0)
        self.assertEqual(e.n, 3)

    def test_paired_ratio_skips_rounds_without_both_values(self):
        e = stats.paired_ratio([(1.1, 1.0), (None, 1.0), (1.1, 0)])
        self.assertEqual(e.n, 1)
        self.assertAlmostEqual(e.point, 1.1)
        self.assertIsNone(stats.paired_ratio([(None, 1.0)]))

    def test_steady_ratio_gives_a_tight_interval(self):
        rng = random.Random(3)
        pairs = [(1.2 * x * rng.uniform(0.99, 1.01), x) for x in (5, 6, 7, 8, 9, 10)]
        e = stats.paired_ratio(pairs)
        self.assertGreater(e.lo, 1.15)
        self.assertLess(e.hi, 1.25)

    def test_unpaired_ratio_of_geometric_means(self):
        e = stats.unpaired_ratio([2.0, 2.0, 2.0], [1.0, 1.0])
        self.assertAlmostEqual(e.point, 2.0)
        self.assertAlmostEqual(e.lo, 2.0)
        self.assertEqual(e.n, 2)
        self.assertIsNone(stats.unpaired_ratio([], [1.0]))

    def test_same_data_same_answer(self):
        pairs = [(1.0 + i / 10, 1.0) for i in range(5)]
        self.assertEqual(stats.paired_ratio(pairs), stats.paired_ratio(pairs))

    def test_a_wider_level_gives_a_wider_interval(self):
        pairs = [(1.0 + (i % 3) / 10, 1.0) for i in range(8)]
        narrow, wide = stats.paired_ratio(pairs, 0.9), stats.paired_ratio(pairs, 0.999)
        self.assertLessEqual(wide.lo, narrow.lo)
        self.assertGreaterEqual(wide.hi, narrow.hi)


class Rule(unittest.TestCase):
    def test_needs_both_the_threshold_and_the_bound_above_one(self):
        self.assertTrue(stats.regressed(1.10, 1.02, 0.05))
        self.assertFalse(stats.regressed(1.10, 0.98, 0.05))  # inside the noise
        self.assertFalse(stats.regressed(1.04, 1.01, 0.05))  # real but below the threshold
        self.assertFalse(stats.regressed(None, 0.0, 0.05))

    def test_bonferroni_confidence_for_a_one_sided_bound(self):
        self.assertAlmostEqual(stats.gate_confidence(1), 0.95)
        self.assertAlmostEqual(stats.gate_confidence(10), 0.995)


if __name__ == "__main__":
    unittest.main()
