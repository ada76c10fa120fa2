"""The one place the test host VM is launched: QEMU's TCG emulating an AMD CPU with SVM, Debian's kernel and the
test host's initramfs (layers.py), a command or script inside it, its console relayed, a hang told and diagnosed."""

import os
import select
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mvmmtools.images import BuildError
from mvmmtools.process import stop
from mvmmtools.say import say
from mvmmtools.testhost import EXIT_FIXTURE, EXIT_HUNG, HOST_CPUS, Fixture, cpus
from mvmmtools.testhost.console import Console
from mvmmtools.testhost.layers import build_initrd


@dataclass
class HostConfig:
    """One test host boot: what runs in it (tools/mvmm-hostvm --help tells each field as its option)."""
    command: tuple = ()  # mvmm's arguments, or with script the script's "$@"; files they name are copied in
    script: str = None  # a busybox sh script to run instead of one command
    mvmm: Path = None  # the mvmm binary (default build/vmm/mvmm)
    peer_qemu: bool = False  # Debian's QEMU in the test host ($PEER_QEMU), or as the command
    files: tuple = ()  # copied in at their absolute paths
    binaries: tuple = ()  # copied in with their shared libraries
    disk_images: tuple = ()  # the test host's virtio disks /dev/vda, /dev/vdb, ... in order
    timeout: float = 600  # s until the test host is stopped as hung
    memory: str = "3G"
    cpus: int = HOST_CPUS
    append: str = ""  # test host kernel parameters
    verbose: bool = False  # relay the test host's own boot and MVMM-HOSTVM lines too
    timestamps: bool = False  # each relayed line on stderr with the s since the latest command started
    interactive: bool = False  # a person at the console: QEMU reads our stdin, partial lines are shown
    color: bool = False  # mvmm may colour its log (our output is a colour terminal)


class TestHost:
    """Boots the test host once with config and relays its console (run); what it said is kept in messages."""

    def __init__(self, config):
        self.config = config
        self.messages = []  # "mvmm-hostvm: ..." lines, as said on stderr
        self.stopped = None  # why stop_when stopped it

    def say(self, msg):
        say(msg, "mvmm-hostvm")
        self.messages.append(f"mvmm-hostvm: {msg}")

    def run(self, sink, stop_when=None):
        """Builds the initramfs, boots the test host, relays its console to sink(bytes) (Console) until the scenario
        ends. stop_when() is asked a few times a second: a reason to stop a test host that stopped making progress
        (kept in stopped). Returns the scenario's exit code; EXIT_HUNG when it was stopped (timeout or stop_when),
        after saying where its CPUs were; EXIT_FIXTURE when the test host could not run it; 130 when interrupted."""
        try:
            with tempfile.TemporaryDirectory(prefix="mvmm-hostvm.") as tmpdir:
                kernel, initrd, qemu_disks = build_initrd(self.config, tmpdir)
                return self._boot(kernel, initrd, qemu_disks, Path(tmpdir) / "monitor", sink, stop_when)
        except BuildError as e:
            self.say(f"building the test host image failed: {e}")
        except Fixture as e:
            self.say(str(e))
        except KeyboardInterrupt:
            self.say("interrupted")
            return 130
        return EXIT_FIXTURE

    def command(self, kernel, initrd, qemu_disks, monitor):
        # no_timer_check: the kernel's boot-time check that timer interrupts arrive through the IO-APIC
        # counts them over a busy-wait of 10 jiffies; on a loaded machine TCG's emulated CPU can be
        # starved through that window, and the test host panicked with "IO-APIC + timer doesn't work".
        c = self.config
        cmdline = "console=ttyS0 panic=-1 no_timer_check" + ("" if c.verbose else " quiet loglevel=1")
        cmdline += f" {c.append}" if c.append else ""
        return ["qemu-system-x86_64", "-accel", "tcg", "-M", "q35", "-cpu", "max", "-m", c.memory,
                "-smp", str(c.cpus), "-nographic", "-no-reboot", "-nic", "none", "-kernel", str(kernel),
                "-initrd", str(initrd), "-append", cmdline, "-monitor", f"unix:{monitor},server=on,wait=off",
                *qemu_disks]

    def _boot(self, kernel, initrd, qemu_disks, monitor, sink, stop_when):
        c = self.config
        console = Console(sink, c.verbose, c.timestamps, c.interactive)
        try:
            qemu = subprocess.Popen(self.command(kernel, initrd, qemu_disks, monitor), stdout=subprocess.PIPE,
                                    stdin=None if c.interactive else subprocess.DEVNULL)
        except OSError as e:
            raise Fixture(f"cannot start qemu-system-x86_64 ({e.strerror}; run tools/setup)") from None
        try:
            hang = self._relay(qemu, console, stop_when)
            if hang or self.stopped:
                self._where_cpus_are(monitor, console, kernel, qemu)
                stop(qemu)
                if hang:
                    self.say(hang)
                return EXIT_HUNG
            if console.exit_code is not None:
                try:  # the test host powers off right after MVMM-HOSTVM-EXIT
                    qemu.wait(30)
                except subprocess.TimeoutExpired:
                    self.say("the test host did not power off after the command ended; killed it")
        except KeyboardInterrupt:
            self.say("interrupted")
            self._where_cpus_are(monitor, console, kernel, qemu)
            return 130
        finally:
            stop(qemu)  # SIGTERM first, so QEMU restores the terminal; SIGKILL if it does not go
        return self._result(console, qemu)

    def _relay(self, qemu, console, stop_when):
        """Relays the console until the scenario ends, QEMU exits or stop_when gives a reason (None), or returns
        the sentence that says the test host hung (the timeout)."""
        deadline = time.monotonic() + self.config.timeout
        last_output = time.monotonic()
        fd = qemu.stdout.fileno()
        while True:
            now = time.monotonic()
            if now >= deadline:
                return (f"hung: the test host did not finish within {self.config.timeout:g} s (last console output "
                        f"{now - last_output:.0f} s ago"
                        f"{', before the command started' if console.started is None else ''}); killed it")
            self.stopped = stop_when() if stop_when else None
            if self.stopped:
                return None
            ready, _, _ = select.select([fd], [], [], min(0.05, deadline - now))
            if not ready:
                console.idle()
                continue
            data = os.read(fd, 65536)
            if not data:
                return None
            last_output = time.monotonic()
            console.feed(data)
            if console.exit_code is not None:
                return None

    def _where_cpus_are(self, monitor, console, kernel, qemu):
        """A test host that stopped answering: where its CPUs are (cpus.py), before it is stopped."""
        if console.ready is None or console.ended is not None or console.interactive:
            return
        try:
            symbols = cpus.Symbols(kernel.parent.parent, kernel.name.removeprefix("vmlinuz-"), console.layout)
            for line in cpus.describe(monitor, symbols, qemu_pid=qemu.pid):
                self.say(line)
        except (OSError, ValueError) as e:
            self.say(f"could not ask the outer QEMU where the test host's CPUs are: {e}")

    def _result(self, console, qemu):
        if console.pending:
            console.feed(b"\n")
        if self.config.timestamps:
            self.say(console.summary())
        if console.exit_code is None:
            what = "the outer QEMU failed" if not console.boot_lines else "the test host ended"
            raise Fixture(f"{what} (QEMU exit code {qemu.returncode}) without reporting an exit code\n"
                          + console.diagnosis())
        if console.exit_code == EXIT_FIXTURE and console.ready is None:
            raise Fixture("the test host could not start the scenario\n" + console.diagnosis())
        return console.exit_code
