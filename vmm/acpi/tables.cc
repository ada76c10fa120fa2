#include "vmm/acpi/tables.h"

#include <cstring>
#include <string_view>

#include "vmm/acpi/aml.h"

namespace mvmm::acpi {

namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kHeaderSize = 36;
constexpr size_t kChecksumOffset = 9;
constexpr size_t kFadtSize = 276;  // ACPI 6.x

void put(Bytes& b, size_t offset, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b[offset + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_text(Bytes& b, size_t offset, std::string_view s) {
    std::memcpy(b.data() + offset, s.data(), s.size());
}
void append_le(Bytes& b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A table of `size` bytes with the standard header filled in (length, no checksum yet).
Bytes table(std::string_view signature, uint8_t revision, size_t size) {
    Bytes t(size, 0);
    put_text(t, 0, signature);
    put(t, 4, size, 4);
    t[8] = revision;
    put_text(t, 10, "MVMM  ");
    put_text(t, 16, "MVMMACPI");
    put(t, 24, 1, 4);
    put_text(t, 28, "MVMM");
    put(t, 32, 1, 4);
    return t;
}

void finish(Bytes& t) {
    put(t, 4, t.size(), 4);
    t[kChecksumOffset] = 0;
    t[kChecksumOffset] = checksum_fix(t.data(), t.size());
}

// Generic Address Structure for an I/O port register.
void put_io_gas(Bytes& t, size_t offset, uint16_t port, uint8_t bits) {
    t[offset] = 1;  // system I/O space
    t[offset + 1] = bits;
    t[offset + 2] = 0;
    t[offset + 3] = bits <= 8 ? 1 : bits <= 16 ? 2 : 3;  // access size
    put(t, offset + 4, port, 8);
}

Bytes dsdt(const MachineInfo& m) {
    namespace r = aml::resource;
    const PciHostInfo& pci = m.pci;
    Bytes t = table("DSDT", 2, kHeaderSize);
    Bytes body = aml::join({
        aml::name("_S5_", aml::package({aml::integer(kS5SleepType), aml::integer(kS5SleepType),
                                        aml::integer(0), aml::integer(0)})),
        aml::scope(
            "\\_SB_",
            {
                aml::device("COM1", {aml::name("_HID", aml::eisa_id("PNP0501")),
                                     aml::name("_UID", aml::integer(1)),
                                     aml::name("_CRS", r::template_of({
                                                           r::io(kCom1Port, 8),
                                                           r::irq(kCom1Irq),
                                                       }))}),
                aml::device(
                    "PCI0",
                    {aml::name("_HID", aml::eisa_id("PNP0A08")),
                     aml::name("_CID", aml::eisa_id("PNP0A03")), aml::name("_ADR", aml::integer(0)),
                     aml::name("_SEG", aml::integer(0)), aml::name("_UID", aml::integer(0)),
                     aml::name("_BBN", aml::integer(0)),
                     // _OSC(UUID, revision, count, capabilities): the OS gets every control it
                     // asks for, native PCIe hot-plug (pciehp) above all; the returned buffer
                     // is the one passed in, so no error bit is set.
                     aml::method("_OSC", 4, {aml::return_value(aml::arg(3))}),
                     aml::name("_CRS", r::template_of({
                                           r::bus_numbers(0, pci.last_bus),
                                           r::io(0xcf8, 8),
                                           r::io_window(0, 0xcf7),
                                           r::io_window(pci.io_first, pci.io_last),
                                           r::memory32_window(
                                               static_cast<uint32_t>(pci.mmio32_first.value()),
                                               static_cast<uint32_t>(pci.mmio32_last.value())),
                                           r::memory64_window(pci.mmio64_first.value(),
                                                              pci.mmio64_last.value()),
                                       }))}),
                // Reserves ECAM as a motherboard resource, as Linux likes to see it.
                aml::device("RES0",
                            {aml::name("_HID", aml::eisa_id("PNP0C02")),
                             aml::name("_CRS", r::template_of({r::memory32_fixed(
                                                   static_cast<uint32_t>(pci.ecam_base.value()),
                                                   static_cast<uint32_t>(
                                                       (uint64_t{pci.last_bus} + 1) << 20))}))}),
            }),
    });
    t.insert(t.end(), body.begin(), body.end());
    finish(t);
    return t;
}

Bytes fadt(GuestAddr dsdt_addr) {
    Bytes t = table("FACP", 6, kFadtSize);
    put(t, 40, dsdt_addr.value(), 4);
    put(t, 46, kSciIrq, 2);
    put(t, 56, kPm1EventPort, 4);
    put(t, 64, kPm1ControlPort, 4);
    t[88] = 4;  // PM1_EVT_LEN
    t[89] = 2;  // PM1_CNT_LEN
    // IAPC_BOOT_ARCH: no 8042, no VGA, no CMOS RTC — nothing for the guest to probe.
    put(t, 109, (1u << 2) | (1u << 5), 2);
    // Flags: WBINVD works, power/sleep buttons absent, reset register supported.
    put(t, 112, (1u << 0) | (1u << 4) | (1u << 5) | (1u << 10), 4);
    put_io_gas(t, 116, kResetPort, 8);
    t[128] = kResetValue;
    t[131] = 4;  // FADT minor version: 6.4
    put(t, 140, dsdt_addr.value(), 8);
    put_io_gas(t, 148, kPm1EventPort, 32);
    put_io_gas(t, 172, kPm1ControlPort, 16);
    put_text(t, 268, "MVMM");
    finish(t);
    return t;
}

Bytes madt(const MachineInfo& m) {
    Bytes t = table("APIC", 5, kHeaderSize + 8);
    put(t, 36, m.lapic.value(), 4);
    put(t, 40, 1, 4);  // PCAT_COMPAT: dual 8259s present
    for (unsigned cpu = 0; cpu < m.cpus; ++cpu) {
        t.insert(t.end(), {0, 8, static_cast<uint8_t>(cpu), static_cast<uint8_t>(cpu)});
        append_le(t, 1, 4);  // enabled
    }
    t.insert(t.end(), {1, 12, 0, 0});  // IOAPIC id 0
    append_le(t, m.ioapic.value(), 4);
    append_le(t, 0, 4);  // GSI base
    // ISA IRQ 0 is wired to GSI 2; the SCI is level-triggered, active high.
    t.insert(t.end(), {2, 10, 0, 0});
    append_le(t, 2, 4);
    append_le(t, 0, 2);
    t.insert(t.end(), {2, 10, 0, kSciIrq});
    append_le(t, kSciIrq, 4);
    append_le(t, 0x000d, 2);
    // LINT1 of every processor is the NMI input.
    t.insert(t.end(), {4, 6, 0xff, 0, 0, 1});
    finish(t);
    return t;
}

Bytes mcfg(const PciHostInfo& pci) {
    Bytes t = table("MCFG", 1, kHeaderSize + 8);
    append_le(t, pci.ecam_base.value(), 8);
    append_le(t, 0, 2);  // segment
    t.push_back(0);      // first bus
    t.push_back(pci.last_bus);
    append_le(t, 0, 4);
    finish(t);
    return t;
}

// Appends `t` to the blob at a 16-byte boundary and returns its guest address.
GuestAddr place(Bytes& blob, GuestAddr base, const Bytes& t) {
    blob.resize((blob.size() + 15) & ~size_t{15}, 0);
    GuestAddr at = base + blob.size();
    blob.insert(blob.end(), t.begin(), t.end());
    return at;
}

}  // namespace

uint8_t checksum_fix(const uint8_t* bytes, size_t len) {
    uint8_t sum = 0;
    for (size_t i = 0; i < len; ++i) sum = static_cast<uint8_t>(sum + bytes[i]);
    return static_cast<uint8_t>(-sum);
}

Tables build_tables(const MachineInfo& m, GuestAddr base) {
    constexpr size_t kRsdpSize = 36;
    Bytes blob(kRsdpSize, 0);
    GuestAddr dsdt_addr = place(blob, base, dsdt(m));
    std::vector<GuestAddr> entries = {place(blob, base, fadt(dsdt_addr)),
                                      place(blob, base, madt(m)), place(blob, base, mcfg(m.pci))};
    Bytes xsdt = table("XSDT", 1, kHeaderSize);
    for (GuestAddr e : entries) append_le(xsdt, e.value(), 8);
    finish(xsdt);
    GuestAddr xsdt_addr = place(blob, base, xsdt);

    put_text(blob, 0, "RSD PTR ");
    put_text(blob, 9, "MVMM  ");
    blob[15] = 2;  // revision: ACPI 2.0+, XSDT
    put(blob, 20, kRsdpSize, 4);
    put(blob, 24, xsdt_addr.value(), 8);
    blob[8] = checksum_fix(blob.data(), 20);
    blob[32] = checksum_fix(blob.data(), kRsdpSize);
    return {base, std::move(blob), base};
}

}  // namespace mvmm::acpi
