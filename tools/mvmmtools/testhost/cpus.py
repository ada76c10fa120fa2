"""Where the test host's CPUs are when it stops answering: asked from the outer QEMU's monitor, named from the test
kvm/kvm_amd's symbol tables (see guest-images/README.md, "When the test host freezes").

The test host's /init reports where KASLR put the kernel and the KVM modules' code on its MVMM-HOSTVM-READY line
(`_text=ADDR kvm_amd:.text=ADDR ...`); parse_layout() reads those words, describe() asks QEMU ten times over two seconds,
so a CPU spinning in a loop is told from one that is halted or making progress."""

import bisect
import collections
import os
import re
import socket
import subprocess
import time
from pathlib import Path

MONITOR_PROMPT = b"(qemu) "


def parse_layout(words):
    """{'_text': addr, 'kvm_amd:.text': addr, ...} from the READY line's words (others are ignored)."""
    layout = {}
    for word in words:
        name, _, value = word.partition("=")
        if value and re.fullmatch(r"[0-9a-fA-Fx]+", value):
            layout[name] = int(value, 16)
    return layout


def monitor_command(path, command, timeout=5.0):
    """One HMP command on QEMU's monitor socket; its output without the echo, escapes and prompt."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(str(path))

        def until_prompt():
            data = b""
            while not data.endswith(MONITOR_PROMPT):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data

        until_prompt()  # the banner
        sock.sendall(command.encode() + b"\n")
        text = until_prompt().decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]|\r", "", text)
    return text.split("\n", 1)[1].rsplit("(qemu)", 1)[0] if "\n" in text else ""


def parse_registers(text):
    """[{cpu, rip, rfl, cpl, hlt, cr3, efer}] from `info registers -a`."""
    cpus = []
    for block in re.split(r"^CPU#(\d+)\s*$", text, flags=re.M)[1:]:
        if block.isdigit():
            cpus.append({"cpu": int(block)})
            continue
        fields = dict(re.findall(r"\b(RIP|RFL|CPL|HLT|CR3|EFER)=([0-9a-fA-F]+)", block))
        cpus[-1].update({k.lower(): int(v, 16) for k, v in fields.items()})
    return cpus


class Symbols:
    """Names code addresses of the kvm/kvm_amd modules (their symbol tables ship in the package) and of the test host
    kernel as `kernel _text+OFFSET`: Debian's System.map is a stub, the real one is in linux-image-RELEASE-dbg."""

    KERNEL_TEXT_SIZE = 64 << 20

    def __init__(self, kernel_root, release, layout):
        self.text = layout.get("_text")
        self.ranges = []  # (start, names sorted by address, addresses)
        kvm_dir = kernel_root / "lib" / "modules" / release / "kernel" / "arch" / "x86" / "kvm"
        for module, ko in (("kvm", "kvm.ko"), ("kvm_amd", "kvm-amd.ko")):
            for section, entries in self._module_sections(kvm_dir / ko).items():
                if f"{module}:{section}" in layout:
                    self._add(layout[f"{module}:{section}"], entries, f"{module}:")
        self.ranges.sort(key=lambda r: r[0])

    def _add(self, offset, entries, prefix):
        entries = sorted((a + offset, prefix + n) for a, n in entries)
        if entries:
            self.ranges.append((entries[0][0], [n for _, n in entries], [a for a, _ in entries]))

    @staticmethod
    def _module_sections(ko):
        """{section: [(offset, function)]} from objdump -t: a module's symbols are relative to their section."""
        sections = {}
        try:
            out = subprocess.run(["objdump", "-t", str(ko)], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return sections
        for m in re.finditer(r"^([0-9a-f]{16}) .{7} (\S+)\s+[0-9a-f]+ (\S+)$", out, flags=re.M):
            if m.group(2).endswith("text"):
                sections.setdefault(m.group(2), []).append((int(m.group(1), 16), m.group(3)))
        return sections

    def name(self, address):
        """'module:function+0xoff', 'kernel _text+0xoff', or '' (user space or a guest)."""
        if self.text is not None and 0 <= address - self.text < self.KERNEL_TEXT_SIZE:
            return f"kernel _text+{address - self.text:#x}"
        starts = [r[0] for r in self.ranges]
        i = bisect.bisect_right(starts, address) - 1
        if i < 0:
            return ""
        _, names, addresses = self.ranges[i]
        j = bisect.bisect_right(addresses, address) - 1
        offset = address - addresses[j]
        return f"{names[j]}+{offset:#x}" if offset < 0x10000 else ""


# What parse_lapic() keeps of `info lapic N`, in order: the timer's mode and vector, whether it is armed (a one-shot
# timer that fired reads current=0), the interrupts being served and waiting, and the priorities that block them.
LAPIC_FIELDS = [
    (r"^LVTT\s+0x([0-9a-f]+)\s+(.*?)\s*$", lambda m: f"LVTT={m[1]} ({' '.join(m[2].split())})"),
    (r"initial_count = (\d+) current_count = (\d+)", lambda m: f"timer initial={m[1]} current={m[2]}"),
    (r"^ISR\s+(.*?)\s*$", lambda m: f"ISR=[{m[1]}]"),
    (r"^IRR\s+(.*?)\s*$", lambda m: f"IRR=[{m[1]}]"),
    (r"TPR 0x([0-9a-f]+).*PPR 0x([0-9a-f]+)", lambda m: f"TPR={m[1]} PPR={m[2]}"),
]


def parse_lapic(text):
    """One line of the timer and interrupt state from `info lapic N` (LAPIC_FIELDS)."""
    return " ".join(show(m) for pattern, show in LAPIC_FIELDS if (m := re.search(pattern, text, re.M)))


def task_times(pid):
    """{tid: (name, state, cpu ticks, wchan)} of a host process's threads, from /proc."""
    tasks = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            wchan = (task / "wchan").read_text().strip() or "-"
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        tasks[int(task.name)] = (name, rest[0], int(rest[11]) + int(rest[12]), wchan)
    return tasks


def describe(monitor, symbols, samples=10, interval=0.2, qemu_pid=None):
    """Lines saying where each test host CPU is, from `samples` looks `interval` s apart (a CPU spinning in a loop is
    told from one halted or making progress), each CPU's local APIC timer and interrupt state (a test host whose
    timer is not armed, or whose timer interrupt waits in the IRR, never leaves a guest), and, given the outer QEMU's
    pid, what its threads did meanwhile (a vCPU thread at 100 % beside a main loop thread asleep on a lock)."""
    before = task_times(qemu_pid) if qemu_pid else {}
    start = time.monotonic()
    looks = []
    for i in range(samples):
        if i:
            time.sleep(interval)
        looks.append(parse_registers(monitor_command(monitor, "info registers -a")))
    lines = []
    for cpu in looks[-1]:
        seen = collections.Counter(next((c.get("rip", 0) for c in look if c["cpu"] == cpu["cpu"]), 0) for look in looks)
        rips = ", ".join(f"{rip:x}" + (f" {symbols.name(rip)}" if symbols.name(rip) else "") + f" x{n}"
                         for rip, n in seen.most_common())
        lines.append(f"test host CPU{cpu['cpu']}: RIP {rips} CPL={cpu.get('cpl', '?')} HLT={cpu.get('hlt', '?')} "
                     f"IF={(cpu.get('rfl', 0) >> 9) & 1} CR3={cpu.get('cr3', 0):x} EFER={cpu.get('efer', 0):x}")
        lapic = parse_lapic(monitor_command(monitor, f"info lapic {cpu['cpu']}"))
        lines.append(f"test host CPU{cpu['cpu']} LAPIC: {lapic}")
    if qemu_pid:
        after = task_times(qemu_pid)
        seconds = time.monotonic() - start
        hz = os.sysconf("SC_CLK_TCK")
        for tid, (name, state, ticks, wchan) in sorted(after.items()):
            busy = (ticks - before.get(tid, (0, 0, ticks))[2]) / hz / seconds
            lines.append(f"outer QEMU thread {tid} {name}: {state} {busy:.0%} CPU, waiting in {wchan}")
    return lines
