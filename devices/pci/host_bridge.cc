#include "devices/pci/host_bridge.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "devices/pci/config_access.h"
#include "devices/pci/config_space.h"

namespace mvmm::devices::pci {

namespace {

constexpr uint8_t kLastDevice = 31;
constexpr unsigned kFunctionsPerSlot = 8;

// 00:00.0: a function that only says "host bridge".
class HostBridgeFunction final : public PciFunction {
  public:
    HostBridgeFunction()
        : config_(ConfigSpace::endpoint({.vendor_id = 0x1b36,
                                         .device_id = 0x0008,
                                         .revision = 0,
                                         .class_code = 0x060000,
                                         .subsystem_vendor_id = 0x1af4,
                                         .subsystem_id = 0x1100})) {}
    void config_read(uint16_t offset, std::span<uint8_t> data) override {
        config_.read(offset, data);
    }
    void config_write(uint16_t offset, std::span<const uint8_t> data) override {
        config_.write(offset, data);
    }

  private:
    ConfigSpace config_;
};

}  // namespace

void PciLayout::validate() const {
    auto fits = [](const AddressWindow& w, uint64_t top) {
        return w.size != 0 && w.base <= top && w.size - 1 <= top - w.base;
    };
    if (ecam_buses == 0 || ecam_buses > 256 || ecam_base.value() % kEcamBytesPerBus != 0 ||
        !ecam_base.checked_add(ecam_buses * kEcamBytesPerBus - 1))
        throw std::invalid_argument("bad PCI ECAM range");
    if (!fits(mmio32, 0xffff'ffff) || !fits(mmio64, ~uint64_t{0}) || !fits(io, 0xffff))
        throw std::invalid_argument("bad PCI window");
}

PciHostBridge::PciHostBridge(const PciLayout& layout, MmioSpace& mmio, PioSpace& pio,
                             Platform& platform, std::shared_ptr<IoHandler> reset_control)
    : layout_((layout.validate(), layout)),
      mmio_(mmio),
      pio_(pio),
      platform_(platform),
      root_(mmio, pio, "00") {
    root_.attach(devfn(0, 0), std::make_shared<HostBridgeFunction>());
    ecam_region_ = mmio_.add(layout_.ecam_base, layout_.ecam_buses * kEcamBytesPerBus,
                             make_ecam_handler(*this), "pci ecam");
    legacy_region_ =
        pio_.add(PioPort(kConfigAddressPort), kConfigPortsBytes,
                 make_legacy_config_handler(*this, std::move(reset_control)), "pci config ports");
}

bool fits_on_root_bus(unsigned slot_functions, unsigned root_ports) {
    const uint64_t port_slots = (uint64_t{root_ports} + kFunctionsPerSlot - 1) / kFunctionsPerSlot;
    return slot_functions + port_slots <= kLastDevice;
}

PciHostBridge::~PciHostBridge() {
    mmio_.remove(ecam_region_);
    pio_.remove(legacy_region_);
}

RootBusAddress PciHostBridge::next_free_slot() const {
    for (uint8_t d = 1; d <= kLastDevice; ++d) {
        bool empty = true;
        for (uint8_t f = 0; f < 8; ++f) empty = empty && !root_.occupied(devfn(d, f));
        if (empty) return {d, 0};
    }
    throw std::runtime_error("no free slot on PCI bus 0");
}

RootBusAddress PciHostBridge::next_port_location() const {
    for (uint8_t d = 1; d <= kLastDevice; ++d) {
        std::optional<uint8_t> free;
        bool ports_only = true;
        for (uint8_t f = 0; f < 8; ++f) {
            const uint8_t at = devfn(d, f);
            if (!root_.occupied(at))
                free = free.value_or(f);
            else
                ports_only = ports_only && root_.holds_port(at);
        }
        if (free && ports_only) return {d, *free};
    }
    throw std::runtime_error("no room for another PCIe root port on bus 0");
}

RootBusAddress PciHostBridge::attach(std::shared_ptr<PciFunction> function, Placement placement) {
    std::lock_guard lock(mutex_);
    if (const auto* slot = std::get_if<RootBusSlot>(&placement)) {
        const RootBusAddress at =
            slot->device ? RootBusAddress{*slot->device, slot->function} : next_free_slot();
        if (at.device > kLastDevice || at.function > 7)
            throw std::runtime_error("no PCI slot " + std::to_string(at.device) + "." +
                                     std::to_string(at.function));
        root_.attach(devfn(at.device, at.function), std::move(function));
        return at;
    }
    return add_root_port(std::move(function));
}

RootBusAddress PciHostBridge::add_empty_root_port() {
    std::lock_guard lock(mutex_);
    return add_root_port(nullptr);
}

RootBusAddress PciHostBridge::add_root_port(std::shared_ptr<PciFunction> function) {
    RootBusAddress at = next_port_location();
    at.port = static_cast<uint8_t>(ports_.size() + 1);
    auto port = std::make_shared<RootPort>(at.port, platform_);
    PciBus& secondary = root_.attach_port(devfn(at.device, at.function), port);
    if (function) {
        secondary.attach(devfn(0, 0), std::move(function));
        port->set_slot_occupied();
    }
    ports_.push_back({port, &secondary});
    port->set_release_handler([this, number = at.port] { release(ports_[number - 1]); });
    return at;
}

PciHostBridge::Port& PciHostBridge::port(uint8_t number) {
    if (number == 0 || number > ports_.size())
        throw std::runtime_error("no root port " + std::to_string(number));
    return ports_[number - 1];
}

bool PciHostBridge::is_free(const Port& port) {
    return !port.port->occupied() && port.port->power_indicator() == RootPort::Indicator::Off;
}

void PciHostBridge::set_unplug_handler(UnplugHandler handler) {
    std::lock_guard lock(mutex_);
    on_unplug_ = std::move(handler);
}

void PciHostBridge::plug(uint8_t number, std::shared_ptr<PciFunction> function) {
    std::lock_guard lock(mutex_);
    Port& target = port(number);
    if (!is_free(target))
        throw std::runtime_error(
            "root port " + std::to_string(number) +
            (target.port->occupied() ? " holds a device" : " is still being emptied by the guest"));
    target.secondary->attach(devfn(0, 0), std::move(function));
    target.port->insert_card();
}

void PciHostBridge::request_unplug(uint8_t number) {
    std::lock_guard lock(mutex_);
    Port& target = port(number);
    if (!target.port->occupied())
        throw std::runtime_error("root port " + std::to_string(number) + " is empty");
    if (target.unplug_requested)
        throw std::runtime_error("root port " + std::to_string(number) +
                                 ": removal already requested, the guest has not released it yet");
    if (!target.port->powered()) {
        release(target);  // the guest never powered it on: nothing to wait for
        return;
    }
    target.unplug_requested = true;
    // A second press would cancel the first (pciehp): hence one request at a time.
    target.port->press_attention_button();
}

void PciHostBridge::release(Port& target) {
    auto function = target.secondary->detach(devfn(0, 0));
    target.unplug_requested = false;
    target.port->remove_card();
    if (function && on_unplug_) on_unplug_(target.port->number(), std::move(function));
}

std::vector<SlotState> PciHostBridge::slots() const {
    std::lock_guard lock(mutex_);
    std::vector<SlotState> states;
    for (const Port& p : ports_)
        states.push_back({p.port->number(), p.port->occupied(), p.port->powered(),
                          p.unplug_requested, is_free(p)});
    return states;
}

void PciHostBridge::config_read(uint8_t bus, uint8_t devfn, uint16_t offset,
                                std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    PciBus* target = root_.route(bus, 0);
    if (!target || !target->config_read(devfn, offset, data)) std::ranges::fill(data, 0xff);
}

void PciHostBridge::config_write(uint8_t bus, uint8_t devfn, uint16_t offset,
                                 std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    PciBus* target = root_.route(bus, 0);
    if (!target || !target->config_write(devfn, offset, data)) return;
    // Commands, BARs, bus numbers and windows all live in the header.
    if (offset >= reg::kHeaderEnd) return;
    root_.sync_mappings([this](BarKind kind, uint64_t base, uint64_t size) {
        if (kind == BarKind::Io) return layout_.io.contains(base, size);
        return layout_.mmio32.contains(base, size) || layout_.mmio64.contains(base, size);
    });
}

}  // namespace mvmm::devices::pci
