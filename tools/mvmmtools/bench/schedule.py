"""The order of boot-bench's boots. Times drift within a test host boot, so a variant that always ran before
another would carry that drift into their paired ratio: over the rounds, every pair of variants must run in
each order equally often, whatever the number of variants."""


def rotated(items, shift):
    items = list(items)
    shift %= len(items)
    return items[shift:] + items[:shift]


def round_order(items, index):
    """The order of `items` in round `index` (from 0): the rotation by index // 2, reversed in odd rounds
    (A,B,Q / Q,B,A / B,Q,A / A,Q,B / ...). Any two items swap places from an even round to the next, so each
    pair runs in each order equally often over every two rounds (in an odd number of rounds, one order once
    more); over 2 x len(items) rounds every item also takes every place equally often."""
    order = rotated(items, index // 2)
    return order[::-1] if index % 2 else order


def schedule(warmup, reps, configurations, variants):
    """[(tag, phase, rep, configuration index, variant)]: the warm-up rounds ("w") then the measured ones ("r");
    each round boots every configuration once per variant. The configurations rotate by one per round; the
    variants take round_order by the round's number within its phase, so the measured rounds are balanced
    whatever the number of warm-up rounds."""
    plan, turn = [], 0
    for phase, count in (("w", warmup), ("r", reps)):
        for rep in range(1, count + 1):
            for ci in rotated(range(configurations), turn):
                for v in round_order(variants, rep - 1):
                    plan.append((f"{phase}{rep}.c{ci}.{v.name}", phase, rep, ci, v))
            turn += 1
    return plan
