"""mvmmtools.testhost.cpus: the READY line's layout, `info registers -a` and `info lapic` parsing, naming addresses."""

import unittest
from pathlib import Path

from mvmmtools.testhost import cpus

# Trimmed from QEMU 7.2's `info registers -a` on a two-CPU test host.
REGISTERS = """CPU#0
RAX=0000000000000000 RBX=ffffffffab613940 RCX=0000000000000000 RDX=0000000000000001
RIP=ffffffffaaa17a0b RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1
CR0=80050033 CR2=00007f3c2b9e6000 CR3=0000000101a14000 CR4=00350ef0
EFER=0000000000000d01
CPU#1
RIP=ffffffffc0d1203c RFL=00000046 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=0
CR0=80050033 CR2=0000000000000000 CR3=0000000102b40000 CR4=00350ef0
EFER=0000000000001d01
"""

# Trimmed from QEMU 7.2's `info lapic 0` on a test host whose timer interrupt waits in the IRR.
LAPIC = """dumping local APIC state for CPU 0

LVT0\t 0x00010700 active-hi edge  masked                      ExtINT (vec 0)
LVTT\t 0x000000ec active-hi edge                  one-shot     Fixed  (vec 236)
Timer\t DCR=0x3 (divide by 16) initial_count = 221588 current_count = 0
SPIV\t 0x000001ff APIC enabled, focus=off, spurious vec 255
ESR\t 0x00000000
ISR\t (none)
IRR\t 236

APR 0x00 TPR 0x10 DFR 0x0f LDR 0x01 PPR 0x10
"""


class CpusTest(unittest.TestCase):
    def test_layout_keeps_addresses_only(self):
        layout = cpus.parse_layout(["_text=ffffffffaa000000", "kvm_amd:.text=ffffffffc0d00000", "junk", "x="])
        self.assertEqual(layout, {"_text": 0xffffffffaa000000, "kvm_amd:.text": 0xffffffffc0d00000})

    def test_registers_of_each_cpu(self):
        found = cpus.parse_registers(REGISTERS)
        self.assertEqual([c["cpu"] for c in found], [0, 1])
        self.assertEqual(found[0]["rip"], 0xffffffffaaa17a0b)
        self.assertEqual((found[0]["hlt"], found[1]["hlt"]), (1, 0))
        self.assertEqual(found[1]["rfl"] >> 9 & 1, 0)  # interrupts off
        self.assertEqual(found[1]["efer"], 0x1d01)  # SVME: KVM is on

    def test_lapic_timer_and_interrupts(self):
        self.assertEqual(cpus.parse_lapic(LAPIC),
                         "LVTT=000000ec (active-hi edge one-shot Fixed (vec 236)) timer initial=221588 current=0 "
                         "ISR=[(none)] IRR=[236] TPR=10 PPR=10")

    def test_names_kernel_and_module_addresses(self):
        symbols = cpus.Symbols(Path("/nonexistent"), "0", {"_text": 0xffffffffaa000000})
        symbols._add(0xffffffffc0d10000, [(0x0, "svm_vcpu_run"), (0x2000, "__svm_vcpu_run")], "kvm_amd:")
        self.assertEqual(symbols.name(0xffffffffaaa17a0b), "kernel _text+0xa17a0b")
        self.assertEqual(symbols.name(0xffffffffc0d1203c), "kvm_amd:__svm_vcpu_run+0x3c")
        self.assertEqual(symbols.name(0x00007f3c2b9e6000), "")  # user space or a guest


if __name__ == "__main__":
    unittest.main()
