// The virtual machine the builder makes from a BootPlan (after Firecracker's builder.rs): guest
// RAM registered with a KVM VM, the address spaces with every device on them, and the vCPUs in
// their power-on state with the kernel, initrd and ACPI tables loaded.  All the guest will see;
// nothing here runs until the Machine starts the vCPUs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "devices/bus/address_space.h"
#include "devices/pci/host_bridge.h"
#include "devices/power/acpi_pm.h"
#include "mem/guest_memory.h"
#include "vmm/cli/validate.h"
#include "vmm/console.h"
#include "vmm/disks.h"
#include "vmm/kvm/kvm.h"
#include "vmm/kvm/kvm_platform.h"
#include "vmm/report/boot_report.h"

namespace mvmm {

namespace devices {
class Uart16550;
}

// What the board tells its owner while it is built and runs.
struct BoardEvents {
    std::function<void(devices::PowerEvent)> power;  // the guest powered off or asked for a reset
    BootReport* report = nullptr;                    // phases of the build, console bytes
};

// A disk device as dumps, the report and the management socket name it.
struct DiskView {
    std::string id;    // "disk3", or the SCSI controller's id
    std::string name;  // "disk 3 (a.img)", "scsi c0 (60 LUNs at start)"
    const devices::virtio::QueueCounters* counters;  // the device's
    std::vector<devices::block::DiskImage*> images;  // the device's (it owns them)
    DiskResizer resize;                              // the device's
    uint8_t port = 0;  // the root port it is behind (hot-pluggable), 0 on the root bus
    devices::virtio::scsi::ScsiController* scsi = nullptr;  // its LUNs, for a SCSI controller
};

struct Board {
    // Builds everything in order: RAM, devices (`disks` are opened already: the board puts them
    // on PCI and owns them), vCPUs, the guest's files.  Throws RamError, boot::BootError or an
    // error of a KVM call.
    Board(const BootPlan& plan, std::vector<Disk> disks, BoardEvents events);
    ~Board();
    Board(const Board&) = delete;
    Board& operator=(const Board&) = delete;

    Kvm kvm;
    Vm vm;
    GuestMemory memory;
    KvmPlatform platform;
    MmioSpace mmio;
    PioSpace pio;
    Console console;
    std::shared_ptr<devices::Uart16550> uart;
    std::unique_ptr<devices::pci::PciHostBridge> pci;
    std::vector<DiskView> disks;  // as built; vmm/disk_hotplug.h keeps them from then on
    std::vector<std::unique_ptr<Vcpu>> vcpus;
};

}  // namespace mvmm
