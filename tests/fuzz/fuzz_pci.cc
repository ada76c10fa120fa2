// fuzz_pci: a guest's config cycles and MMIO through the real dispatch a vCPU exit takes (the
// MMIO and PIO address spaces, ECAM and 0xCF8/0xCFC, the host bridge, a root port), at a
// machine with two virtio-blk functions: one on bus 0, one behind the root port.  BARs, bridge
// windows, MSI-X tables, the virtio common config and notifications are all reachable once
// the guest programs them; the devices' I/O runs on the fuzzer's thread after every access.
//
// Input: accesses until the end, each
//   u8 kind: bits 0-1 where (0 ECAM of buses 0-3, 1 ports 0xCF8-0xCFF, 2 the 32-bit MMIO
//            window, 3 the 64-bit MMIO window), bit 2 write, bits 3-4 log2 of the size
//            (1-8 bytes; port accesses at most 4),
//   u32 offset into that range,
//   u64 value (writes only; the low `size` bytes are written).
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "devices/pci/test_harness.h"
#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/pci/virtio_pci_function.h"
#include "devices/virtio/test_queue_driver.h"
#include "fuzz_support.h"

namespace {

using namespace mvmm;
using namespace mvmm::devices;

constexpr uint64_t kEcamBytes = 4 << 20;  // buses 0-3
constexpr uint64_t kLegacyPorts = 0xcf8;

struct Images {
    fuzz::ScratchImage on_root_bus{64 << 10};
    fuzz::ScratchImage behind_port{64 << 10};
};

// A fresh machine for every input: nothing a previous input programmed survives.
struct Machine {
    explicit Machine(const Images& images) {
        bridge().attach(function(images.on_root_bus.path(), 1), pci::RootBusSlot{});
        bridge().attach(function(images.behind_port.path(), 2), pci::NewRootPort{});
    }
    pci::PciHostBridge& bridge() { return pci.bridge; }

    std::shared_ptr<virtio::pci::VirtioPciFunction> function(const std::string& path,
                                                             uint16_t queues) {
        virtio::blk::DiskConfig config;
        config.path = path;
        config.queues = queues;
        return std::make_shared<virtio::pci::VirtioPciFunction>(
            std::make_unique<virtio::blk::BlkDevice>(config, io), pci.platform, guest.memory());
    }

    boost::asio::io_context io;  // outlives the devices
    virtio::testing::TestGuest guest{1 << 20};
    testing::PciHarness pci;
};

void access(Machine& m, uint8_t kind, uint32_t offset, uint64_t value) {
    const bool write = kind & 4;
    uint32_t size = 1u << ((kind >> 3) & 3);
    std::span<uint8_t> data(reinterpret_cast<uint8_t*>(&value), size);
    const auto layout = testing::test_layout();
    switch (kind & 3) {
        case 0: {
            const GuestAddr at = layout.ecam_base + offset % kEcamBytes;
            write ? (void)m.pci.mmio.write(at, data) : (void)m.pci.mmio.read(at, data);
            return;
        }
        case 1: {
            data = data.first(std::min(size, 4u));
            const PioPort at(static_cast<uint16_t>(kLegacyPorts + offset % 8));
            write ? (void)m.pci.pio.write(at, data) : (void)m.pci.pio.read(at, data);
            return;
        }
        default: {
            const auto& window = (kind & 3) == 2 ? layout.mmio32 : layout.mmio64;
            const GuestAddr at(window.base + offset % window.size);
            write ? (void)m.pci.mmio.write(at, data) : (void)m.pci.mmio.read(at, data);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const Images images;
    Machine machine(images);
    fuzz::ByteReader in({data, size});
    while (!in.empty()) {
        const auto kind = in.take<uint8_t>();
        const auto offset = in.take<uint32_t>();
        const auto value = (kind & 4) ? in.take<uint64_t>() : 0;
        access(machine, kind, offset, value);
        machine.io.restart();  // it stops whenever it runs out of work
        machine.io.poll();
    }
    return 0;
}
