"""mvmmtools.bench.schedule: boot-bench's order of boots is balanced, whatever the number of variants."""

import itertools
import unittest

from mvmmtools.bench.guest_config import Variant
from mvmmtools.bench.schedule import round_order, schedule


def variants(count):
    return [Variant(f"v{i}", "mvmm") for i in range(count - 1)] + [Variant("qemu", "qemu")]


def orders(plan, configuration=0, phase="r"):
    """{rep: [variant names in the order they booted]} of one configuration's rounds in a phase."""
    found = {}
    for _, p, rep, ci, v in plan:
        if p == phase and ci == configuration:
            found.setdefault(rep, []).append(v.name)
    return found


def before(rounds, first, second):
    """In how many rounds `first` booted before `second`."""
    return sum(1 for order in rounds.values() if order.index(first) < order.index(second))


class Balance(unittest.TestCase):
    def test_every_pair_runs_in_each_order_equally_often(self):
        for count, reps, warmup in itertools.product(range(2, 6), range(1, 9), (0, 1)):
            kinds = variants(count)
            rounds = orders(schedule(warmup, reps, 2, kinds), configuration=1)
            for a, b in itertools.combinations([v.name for v in kinds], 2):
                imbalance = before(rounds, a, b) - before(rounds, b, a)
                self.assertLessEqual(abs(imbalance), reps % 2, f"{a} before {b}: {count} variants, {reps} rounds, "
                                                               f"{warmup} warm-up: {rounds}")

    def test_a_b_and_qemu(self):
        rounds = orders(schedule(0, 6, 1, variants(3)))
        self.assertEqual(rounds[1], ["v0", "v1", "qemu"])
        self.assertEqual(rounds[2], ["qemu", "v1", "v0"])
        self.assertEqual(before(rounds, "v0", "v1"), 3)

    def test_every_variant_takes_every_place_equally_often(self):
        for count in range(1, 6):
            places = [round_order(range(count), i) for i in range(2 * count)]
            for item, place in itertools.product(range(count), range(count)):
                self.assertEqual(sum(1 for order in places if order[place] == item), 2, f"{count}: {places}")

    def test_each_round_boots_every_configuration_once_per_variant(self):
        kinds = variants(3)
        plan = schedule(2, 3, 4, kinds)
        self.assertEqual(len(plan), (2 + 3) * 4 * 3)
        self.assertEqual(len({tag for tag, *_ in plan}), len(plan))
        for phase, rep in [("w", 1), ("w", 2)] + [("r", r) for r in (1, 2, 3)]:
            booted = sorted((ci, v.name) for _, p, r, ci, v in plan if (p, r) == (phase, rep))
            self.assertEqual(booted, sorted(itertools.product(range(4), [v.name for v in kinds])))
        self.assertEqual([p for _, p, *_ in plan[:24]], ["w"] * 24)  # warm-up first


if __name__ == "__main__":
    unittest.main()
