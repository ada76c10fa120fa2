// Board's constructor: the steps of building a machine from a BootPlan.
#include <spdlog/spdlog.h>

#include "devices/serial/uart16550.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "mem/guest_ram.h"
#include "vmm/acpi/tables.h"
#include "vmm/board.h"
#include "vmm/boot/long_mode.h"
#include "vmm/boot/vcpu_boot.h"
#include "vmm/layout.h"

namespace mvmm {

namespace {

GuestMemory allocate_memory(const Config& config) {
    TerminalProgress progress;
    return allocate_guest_ram(config.memory, layout::ram_ranges(config.memory.size), config.cpus,
                              &progress);
}

devices::pci::PciLayout pci_layout(uint64_t ram_size) {
    devices::pci::PciLayout pci;
    pci.ecam_base = layout::kEcamStart;
    pci.ecam_buses = static_cast<uint16_t>(layout::kEcamSize >> 20);
    pci.mmio32 = {layout::kPciMmio32Start.value(), layout::kPciMmio32Size};
    pci.mmio64 = {layout::pci_mmio64_start(ram_size).value(), layout::kPciMmio64Size};
    pci.io = {layout::kPciIoStart, layout::kPciIoSize};
    return pci;
}

// The ACPI description of the same host bridge.
acpi::PciHostInfo pci_host_info(const devices::pci::PciLayout& pci) {
    return {pci.ecam_base,
            static_cast<uint8_t>(pci.ecam_buses - 1),
            static_cast<uint16_t>(pci.io.base),
            static_cast<uint16_t>(pci.io.last()),
            GuestAddr(pci.mmio32.base),
            GuestAddr(pci.mmio32.last()),
            GuestAddr(pci.mmio64.base),
            GuestAddr(pci.mmio64.last())};
}

void stamp(BootReport* report, BootEvent event) {
    if (report) report->stamp(event);
}

// The legacy devices and the PCI host bridge.
void add_platform_devices(Board& board, const BoardEvents& events) {
    devices::Uart16550::TransmitTap tap;
    if (events.report) tap = [report = events.report](uint8_t byte) { report->serial_byte(byte); };
    board.uart = std::make_shared<devices::Uart16550>(board.platform, acpi::kCom1Irq,
                                                      board.console.output_fd(), std::move(tap));
    board.pio.add(PioPort(acpi::kCom1Port), 8, board.uart, "com1");
    board.pio.add(PioPort(acpi::kPm1EventPort), 8,
                  std::make_shared<devices::AcpiPm1>(acpi::kS5SleepType, events.power), "acpi-pm1");
    // 0xCF9 shares a dword with CONFIG_ADDRESS: the host bridge forwards it.
    board.pci = std::make_unique<devices::pci::PciHostBridge>(
        pci_layout(board.memory.total_size()), board.mmio, board.pio, board.platform,
        std::make_shared<devices::ResetPort>(acpi::kResetValue, events.power));
}

void attach_disks(Board& board, std::vector<Disk> disks, unsigned empty_root_ports) {
    using devices::virtio::blk::DiskBus;
    for (Disk& disk : disks) {
        auto function = std::make_shared<devices::virtio::pci::VirtioPciFunction>(
            std::move(disk.device), board.platform, board.memory);
        const auto at = disk.bus == DiskBus::Root
                            ? board.pci->attach(function, devices::pci::RootBusSlot{})
                            : board.pci->attach(function, devices::pci::NewRootPort{});
        board.disks.push_back({disk.id, disk.name, disk.counters, disk.images,
                               std::move(disk.resize), at.port, disk.scsi});
    }
    for (unsigned i = 0; i < empty_root_ports; ++i) board.pci->add_empty_root_port();
}

// Kernel, initrd, command line, ACPI tables and page tables into guest RAM; every vCPU in its
// power-on state.
void load_guest(Board& board, const BootPlan& plan) {
    const Config& config = plan.config;
    const acpi::MachineInfo info{config.cpus, layout::kIoapic, layout::kLapic,
                                 pci_host_info(board.pci->layout())};
    const auto tables = acpi::build_tables(info, layout::kAcpiStart);
    if (!board.memory.write_bytes(tables.base, tables.bytes))
        throw boot::BootError("the ACPI tables do not fit below 1 MiB");

    std::vector<std::pair<uint64_t, uint64_t>> ram;
    for (const auto& r : board.memory.regions()) ram.emplace_back(r.base.value(), r.size());
    boot::write_long_mode_tables(board.memory);
    const auto boot_info = boot::load_linux(
        board.memory,
        {plan.kernel, plan.initrd, config.cmdline, boot::build_e820(ram), tables.rsdp.value()});
    for (const auto& vcpu : board.vcpus)
        boot::set_power_on_state(*vcpu, board.kvm, config.cpus, boot_info);
}

}  // namespace

Board::Board(const BootPlan& plan, std::vector<Disk> disk_devices, BoardEvents events)
    : vm(kvm), memory(allocate_memory(plan.config)), platform(vm), console(plan.config.serial) {
    stamp(events.report, BootEvent::RamReady);
    memory.register_with_kvm(vm.fd());
    add_platform_devices(*this, events);
    attach_disks(*this, std::move(disk_devices), plan.config.empty_root_ports);
    stamp(events.report, BootEvent::DevicesReady);
    for (unsigned i = 0; i < plan.config.cpus; ++i) vcpus.push_back(std::make_unique<Vcpu>(vm, i));
    load_guest(*this, plan);
    stamp(events.report, BootEvent::GuestLoaded);
}

Board::~Board() = default;

}  // namespace mvmm
