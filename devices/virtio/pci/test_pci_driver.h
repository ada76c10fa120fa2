// Test support: the driver side of virtio-pci, as Linux's PCI core and virtio_pci_modern
// drive a function, through the harness's ECAM and MMIO dispatch (the path a vCPU exit takes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "devices/pci/config_space.h"
#include "devices/pci/test_harness.h"
#include "devices/virtio/pci/transport.h"
#include "devices/virtio/pci/virtio_pci_function.h"

namespace mvmm::devices::virtio::pci::testing {

class PciDriver {
  public:
    PciDriver(devices::testing::PciHarness& h, devices::testing::PciAddr function)
        : h_(h), function_(function) {}

    // Sizes BAR 0 with decoding off, assigns it at `base`, then enables memory decoding and
    // bus mastering.  Returns the BAR's size.
    uint64_t assign_bar(uint64_t base) {
        namespace reg = devices::pci::reg;
        h_.ecam_write<uint16_t>(function_, reg::kCommand, 0);
        h_.ecam_write<uint32_t>(function_, reg::kBar0, 0xffff'ffff);
        h_.ecam_write<uint32_t>(function_, reg::kBar0 + 4, 0xffff'ffff);
        const uint64_t mask = uint64_t{h_.ecam_read<uint32_t>(function_, reg::kBar0 + 4)} << 32 |
                              (h_.ecam_read<uint32_t>(function_, reg::kBar0) & ~0xfu);
        h_.ecam_write<uint32_t>(function_, reg::kBar0, static_cast<uint32_t>(base));
        h_.ecam_write<uint32_t>(function_, reg::kBar0 + 4, static_cast<uint32_t>(base >> 32));
        h_.ecam_write<uint16_t>(
            function_, reg::kCommand,
            devices::pci::command::kMemorySpace | devices::pci::command::kBusMaster);
        bar_ = base;
        return ~mask + 1;
    }
    uint64_t bar() const { return bar_; }

    // Capabilities by (id, cfg_type); cfg_type is 0 but for virtio's vendor capabilities.
    std::map<std::pair<uint8_t, uint8_t>, uint8_t> capabilities() {
        namespace reg = devices::pci::reg;
        std::map<std::pair<uint8_t, uint8_t>, uint8_t> caps;
        for (uint8_t at = h_.ecam_read<uint8_t>(function_, reg::kCapabilities); at != 0;
             at = h_.ecam_read<uint8_t>(function_, at + 1)) {
            const uint8_t id = h_.ecam_read<uint8_t>(function_, at);
            caps[{id, id == 0x09 ? h_.ecam_read<uint8_t>(function_, at + 3) : uint8_t{0}}] = at;
        }
        return caps;
    }

    // Enables MSI-X and points `vectors` entries at the boot CPU, data 0x40 + vector.
    void enable_msix(uint16_t vectors) {
        const uint8_t cap = capabilities().at({0x11, 0});
        h_.ecam_write<uint16_t>(function_, cap + 2, 0x8000);
        for (uint16_t v = 0; v < vectors; ++v) {
            const uint64_t entry = bar_ + VirtioPciFunction::kMsixTableOffset + v * 16;
            h_.mmio_write<uint32_t>(entry, 0xfee0'0000);
            h_.mmio_write<uint32_t>(entry + 8, 0x40 + v);
            h_.mmio_write<uint32_t>(entry + 12, 0);  // unmasked
        }
    }

    template <class T>
    T common(size_t offset) {
        return h_.mmio_read<T>(bar_ + VirtioPciFunction::kCommonOffset + offset);
    }
    template <class T>
    void set_common(size_t offset, T v) {
        h_.mmio_write<T>(bar_ + VirtioPciFunction::kCommonOffset + offset, v);
    }
    uint8_t status() { return common<uint8_t>(offsetof(CommonConfig, device_status)); }
    void set_status(uint8_t v) { set_common<uint8_t>(offsetof(CommonConfig, device_status), v); }

    uint64_t device_features() {
        uint64_t features = 0;
        for (uint32_t select : {0u, 1u}) {
            set_common<uint32_t>(offsetof(CommonConfig, device_feature_select), select);
            features |= uint64_t{common<uint32_t>(offsetof(CommonConfig, device_feature))}
                        << (32 * select);
        }
        return features;
    }
    void set_driver_features(uint64_t features) {
        for (uint32_t select : {0u, 1u}) {
            set_common<uint32_t>(offsetof(CommonConfig, driver_feature_select), select);
            set_common<uint32_t>(offsetof(CommonConfig, driver_feature),
                                 static_cast<uint32_t>(features >> (32 * select)));
        }
    }
    // virtio 1.2, 3.1.1, up to FEATURES_OK.
    void negotiate(uint64_t features) {
        set_status(0);
        set_status(status::kAcknowledge);
        set_status(status::kAcknowledge | status::kDriver);
        set_driver_features(features);
        set_status(status::kAcknowledge | status::kDriver | status::kFeaturesOk);
    }
    void setup_queue(uint16_t index, const QueueConfig& queue, uint16_t vector) {
        set_common<uint16_t>(offsetof(CommonConfig, queue_select), index);
        set_common<uint16_t>(offsetof(CommonConfig, queue_size), queue.size);
        set_common<uint16_t>(offsetof(CommonConfig, queue_msix_vector), vector);
        // Linux writes the 64-bit addresses as two dwords.
        for (auto [field, addr] : {std::pair{offsetof(CommonConfig, queue_desc), queue.desc},
                                   std::pair{offsetof(CommonConfig, queue_driver), queue.avail},
                                   std::pair{offsetof(CommonConfig, queue_device), queue.used}}) {
            set_common<uint32_t>(field, static_cast<uint32_t>(addr.value()));
            set_common<uint32_t>(field + 4, static_cast<uint32_t>(addr.value() >> 32));
        }
        set_common<uint16_t>(offsetof(CommonConfig, queue_enable), 1);
    }
    static constexpr uint8_t kDriverOkStatus =
        status::kAcknowledge | status::kDriver | status::kFeaturesOk | status::kDriverOk;

    // Device-specific configuration (virtio_cread/virtio_cwrite).
    template <class T>
    T device_config(size_t offset) {
        return h_.mmio_read<T>(bar_ + VirtioPciFunction::kDeviceOffset + offset);
    }
    template <class T>
    void set_device_config(size_t offset, T v) {
        h_.mmio_write<T>(bar_ + VirtioPciFunction::kDeviceOffset + offset, v);
    }

    // What vp_notify does: the queue index, 16 bits, at the queue's notify address.
    void kick(uint16_t queue) {
        const uint16_t notify_off = [&] {
            set_common<uint16_t>(offsetof(CommonConfig, queue_select), queue);
            return common<uint16_t>(offsetof(CommonConfig, queue_notify_off));
        }();
        h_.mmio_write<uint16_t>(bar_ + VirtioPciFunction::kNotifyOffset +
                                    notify_off * VirtioPciFunction::kNotifyMultiplier,
                                queue);
    }

  private:
    devices::testing::PciHarness& h_;
    devices::testing::PciAddr function_;
    uint64_t bar_ = 0;
};

// What Linux does with the root ports on bus 0 and the function behind each when no firmware
// ran: a bus number and a 1 MiB memory window (from `window` up) per port, BAR 0 of the
// function assigned, decoding on.  Returns a driver per function, in slot order.
inline std::vector<std::unique_ptr<PciDriver>> enumerate_root_ports(devices::testing::PciHarness& h,
                                                                    uint64_t window) {
    namespace reg = devices::pci::reg;
    std::vector<std::unique_ptr<PciDriver>> drivers;
    uint8_t bus = 1;
    for (uint8_t d = 1; d < 32; ++d) {
        for (uint8_t f = 0; f < 8; ++f) {
            const devices::testing::PciAddr port{0, d, f};
            if (h.ecam_read<uint16_t>(port, reg::kVendorId) == 0xffff) continue;
            const auto base = static_cast<uint32_t>((window >> 16) + (bus - 1) * 0x10);
            h.ecam_write<uint32_t>(port, reg::kPrimaryBus, bus << 8 | bus << 16);
            h.ecam_write<uint32_t>(port, reg::kMemoryBase, base | base << 16);
            h.ecam_write<uint16_t>(port, reg::kCommand, devices::pci::command::kMemorySpace);
            auto driver = std::make_unique<PciDriver>(h, devices::testing::PciAddr{bus, 0, 0});
            driver->assign_bar(uint64_t{base} << 16);
            drivers.push_back(std::move(driver));
            ++bus;
        }
    }
    return drivers;
}

}  // namespace mvmm::devices::virtio::pci::testing
