"""The test host's console as the outer QEMU prints it: its own boot hidden, the scenario's output relayed, and the
MVMM-HOSTVM-* lines caught (guest-images/README.md, "The test host")."""

import re
import sys
import time

from mvmmtools.testhost import EXIT_FIXTURE, cpus


class Console:
    """Reads the test host's console: hides its boot, relays what the scenario prints, catches MVMM-HOSTVM-* lines.

    The test host prints MVMM-HOSTVM-READY when it starts the scenario, MVMM-HOSTVM-EXEC before each command and
    MVMM-HOSTVM-EXIT <code> at the end; these lines are not relayed (verbose shows them, with the boot). sink(bytes)
    takes what is relayed: whole lines, and with interactive a partial line (a shell prompt) when nothing follows."""

    def __init__(self, sink, verbose=False, timestamps=False, interactive=False):
        self.sink, self.verbose, self.timestamps, self.interactive = sink, verbose, timestamps, interactive
        self.begin = time.monotonic()
        self.ready = None  # when the scenario started (monotonic)
        self.started = None  # when the first command started
        self.last_exec = None  # when the latest command started: timestamps count from here
        self.ended = None
        self.exit_code = None
        self.layout = {}  # where the test host's kernel and KVM code are (MVMM-HOSTVM-READY's words)
        self.boot_lines = []  # the test host's own output, for a diagnosis when it fails
        self.pending = b""

    def feed(self, data):
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        for line in lines:
            self.line(line.rstrip(b"\r"))

    def line(self, line):
        now, text = time.monotonic(), line.decode(errors="replace")
        m = re.search(r"MVMM-HOSTVM-(READY|EXEC|EXIT)\b ?(\S*)", text)
        if m:
            kind = m.group(1)
            if kind == "READY":
                self.ready = now
                self.layout = cpus.parse_layout(text[m.end():].split())
            elif kind == "EXEC":
                self.started = self.started or now
                self.last_exec = now
                self.stamp(now, text)
            else:
                self.ended = now
                self.exit_code = int(m.group(2)) if m.group(2).isdigit() else EXIT_FIXTURE
        elif self.ready is None:
            self.boot_lines.append(text)
        else:
            self.stamp(now, text)
        if self.verbose or (self.ready is not None and not m):
            self.sink(line + b"\n")

    def stamp(self, now, text):
        if self.timestamps:
            since = "+-" if self.last_exec is None else f"+{now - self.last_exec:.3f}"
            print(f"{since} {text}", file=sys.stderr, flush=True)

    def idle(self):
        """Shows a partial line (a shell prompt) when a person is typing at the console."""
        if self.interactive and self.ready is not None and self.pending and \
                not b"MVMM-HOSTVM-EXIT".startswith(self.pending.lstrip(b"\r\n")[:16]):
            self.sink(self.pending)
            self.pending = b""

    def summary(self):
        """The host-side timeline, for timestamps."""
        at = lambda t: "-" if t is None else f"{t - self.begin:.3f}"
        return (f"timeline (s since the outer QEMU started): test host ready {at(self.ready)}, "
                f"first command started {at(self.started)}, scenario ended {at(self.ended)}, "
                f"QEMU exited {at(time.monotonic())}")

    def diagnosis(self):
        return "\n".join(["test host console:"] + self.boot_lines[-30:]) if self.boot_lines else ""
