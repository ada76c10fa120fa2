"""mvmmtools.testhost.console: what is relayed, and what the MVMM-HOSTVM lines say."""

import unittest

from mvmmtools.testhost import EXIT_FIXTURE
from mvmmtools.testhost.console import Console


def fed(*lines):
    relayed = []
    console = Console(relayed.append)
    console.feed(b"".join(line.encode() + b"\r\n" for line in lines))
    return console, relayed


class ConsoleTest(unittest.TestCase):
    def test_the_scenario_is_relayed_and_the_exit_line_read(self):
        console, relayed = fed("[    1.0] the test host's boot", "MVMM-HOSTVM-READY 2.50 _text=ffffffff81000000",
                               "hello", "MVMM-HOSTVM-EXIT 3 alarm-rings=2")
        self.assertEqual(relayed, [b"hello\n"])
        self.assertEqual((console.exit_code, console.alarm_rings), (3, 2))
        self.assertEqual(console.boot_lines, ["[    1.0] the test host's boot"])

    def test_an_exit_line_without_rings_counts_none(self):
        console, _ = fed("MVMM-HOSTVM-READY 1", "MVMM-HOSTVM-EXIT 0")
        self.assertEqual((console.exit_code, console.alarm_rings), (0, 0))

    def test_an_exit_line_without_a_code_is_the_fixtures_failure(self):
        console, _ = fed("MVMM-HOSTVM-READY 1", "MVMM-HOSTVM-EXIT")
        self.assertEqual(console.exit_code, EXIT_FIXTURE)


if __name__ == "__main__":
    unittest.main()
