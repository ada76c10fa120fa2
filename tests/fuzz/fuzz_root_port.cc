// fuzz_root_port: a hostile guest writing the root ports' config space (slot control and
// status, MSI, bus numbers, windows, anything) at random while the host plugs and unplugs
// virtio-blk disks, through the real host bridge and ECAM dispatch.  Three root ports: one
// with a disk from the start, two empty.  Released disks are destroyed after the access, as
// mvmm's releaser thread does.  Checked after every step: a port shows Presence Detect State
// exactly while it holds a card, and the MMIO space holds ECAM plus one BAR per card and
// nothing else (no stale BAR).
//
// Input: steps until the end, each
//   u8 op: bits 0-1 what (0 config write, 1 config read, 2 plug a disk, 3 request unplug),
//          bits 2-3 log2 of the access size (1, 2 or 4 bytes; 8 reads as 4)
//   u8 port: which root port (modulo 3); config accesses of a port whose bit 7 is set go to
//          the device behind it (bus 1 + port), through ECAM like the port's own
//   u16 offset in config space (aligned down to the size)
//   u32 value (config writes only)
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include "devices/pci/test_harness.h"
#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/test_queue_driver.h"
#include "fuzz_support.h"

namespace {

using namespace mvmm;
using namespace mvmm::devices;

constexpr unsigned kPorts = 3;
constexpr uint16_t kSlotStatus = 0x1a;
constexpr uint16_t kPresenceDetectState = 1 << 6;

struct Machine {
    explicit Machine(const fuzz::ScratchImage& image) : image(image) {
        pci.bridge.set_unplug_handler(
            [this](uint8_t, std::shared_ptr<pci::PciFunction> f) { released.push_back(f); });
        ports.push_back(pci.bridge.attach(disk(), pci::NewRootPort{}));
        for (unsigned i = 1; i < kPorts; ++i) ports.push_back(pci.bridge.add_empty_root_port());
    }

    std::shared_ptr<virtio::pci::VirtioPciFunction> disk() {
        virtio::blk::DiskConfig config;
        config.path = image.path();
        return std::make_shared<virtio::pci::VirtioPciFunction>(
            std::make_unique<virtio::blk::BlkDevice>(config, io), pci.platform, guest.memory());
    }

    GuestAddr ecam(uint8_t bus, uint8_t device, uint8_t function, uint16_t offset) const {
        return testing::test_layout().ecam_base +
               ((uint64_t{bus} << 20) | uint64_t{device} << 15 | uint64_t{function} << 12 | offset);
    }

    void check() {
        unsigned cards = 0;
        for (const auto& slot : pci.bridge.slots()) {
            const auto& at = ports.at(slot.port - 1);
            // The PCI Express capability is the first one.
            uint8_t express = 0;
            pci.mmio.read(ecam(0, at.device, at.function, 0x34), {&express, 1});
            uint16_t status = 0;
            pci.mmio.read(ecam(0, at.device, at.function, express + kSlotStatus),
                          {reinterpret_cast<uint8_t*>(&status), 2});
            if (slot.occupied != bool(status & kPresenceDetectState)) __builtin_trap();
            cards += slot.occupied;
        }
        if (pci.mmio.stats().by_region.size() != 1 + cards) __builtin_trap();
    }

    const fuzz::ScratchImage& image;
    boost::asio::io_context io;  // outlives the devices
    virtio::testing::TestGuest guest{1 << 20};
    testing::PciHarness pci;
    std::vector<pci::RootBusAddress> ports;
    std::vector<std::shared_ptr<pci::PciFunction>> released;
};

void step(Machine& m, uint8_t op, uint8_t port_byte, uint16_t offset, uint32_t value) {
    const auto& port = m.ports[port_byte % kPorts];
    const uint8_t number = static_cast<uint8_t>(port_byte % kPorts + 1);
    const uint32_t size = std::min(1u << ((op >> 2) & 3), 4u);
    std::span<uint8_t> data(reinterpret_cast<uint8_t*>(&value), size);
    offset = static_cast<uint16_t>(offset % 4096 & ~(size - 1));
    const GuestAddr at = port_byte & 0x80 ? m.ecam(1 + port_byte % kPorts, 0, 0, offset)
                                          : m.ecam(0, port.device, port.function, offset);
    try {
        switch (op & 3) {
            case 0:
                m.pci.mmio.write(at, data);
                break;
            case 1:
                m.pci.mmio.read(at, data);
                break;
            case 2:
                m.pci.bridge.plug(number, m.disk());
                break;
            case 3:
                m.pci.bridge.request_unplug(number);
                break;
        }
    } catch (const std::runtime_error&) {
        if ((op & 3) < 2) throw;  // only the host's requests may be refused
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const fuzz::ScratchImage image{64 << 10};
    Machine machine(image);
    fuzz::ByteReader in({data, size});
    while (!in.empty()) {
        const auto op = in.take<uint8_t>();
        const auto port = in.take<uint8_t>();
        const auto offset = in.take<uint16_t>();
        const auto value = (op & 3) == 0 ? in.take<uint32_t>() : 0;
        step(machine, op, port, offset, value);
        machine.io.restart();
        machine.io.poll();
        machine.released.clear();
        machine.check();
    }
    return 0;
}
