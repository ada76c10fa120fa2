#include "devices/pci/bus.h"

#include <cstring>
#include <shared_mutex>
#include <stdexcept>

#include <spdlog/fmt/fmt.h>

#include "devices/pci/config_space.h"

namespace mvmm::devices::pci {

namespace {

template <class T>
T read_config(PciFunction& function, uint16_t offset) {
    T v;
    function.config_read(offset, {reinterpret_cast<uint8_t*>(&v), sizeof v});
    return v;
}

std::string slot_name(uint8_t devfn) {
    return fmt::format("{:02x}.{}", devfn >> 3, devfn & 7);
}

}  // namespace

// Stands between the address space and a BAR's handler so that a detached function can be
// destroyed: dispatch calls a handler after leaving its RCU read section, so an access that
// looked the BAR up before it was unmapped may still be on its way in.  close() waits for the
// accesses inside and turns later ones away (reads see all-ones, as from an empty slot).
class PciBus::BarGate final : public IoHandler {
  public:
    explicit BarGate(std::shared_ptr<IoHandler> handler) : handler_(std::move(handler)) {}
    void read(uint64_t offset, std::span<uint8_t> data) override {
        std::shared_lock lock(mutex_);
        if (handler_)
            handler_->read(offset, data);
        else
            std::memset(data.data(), 0xff, data.size());
    }
    void write(uint64_t offset, std::span<const uint8_t> data) override {
        std::shared_lock lock(mutex_);
        if (handler_) handler_->write(offset, data);
    }
    void close() {
        std::unique_lock lock(mutex_);
        handler_.reset();
    }

  private:
    std::shared_mutex mutex_;
    std::shared_ptr<IoHandler> handler_;
};

PciBus::PciBus(MmioSpace& mmio, PioSpace& pio, std::string name)
    : mmio_(mmio), pio_(pio), name_(std::move(name)) {}

PciBus::~PciBus() {
    for (auto& node : nodes_) {
        if (!node) continue;
        for (auto& mapped : node->bars) unregister(mapped);
    }
}

void PciBus::unregister(const MappedBar& mapped) {
    if (mapped.bar.kind == BarKind::Io)
        pio_.remove(mapped.region);
    else
        mmio_.remove(mapped.region);
}

std::shared_ptr<PciFunction> PciBus::detach(uint8_t devfn) {
    if (!occupied(devfn) || nodes_[devfn]->port) return nullptr;
    std::unique_ptr<Node> node = std::move(nodes_[devfn]);
    for (auto& mapped : node->bars) {
        if (mapped.base) node->function->bar_mapped(mapped.bar.index, std::nullopt);
        unregister(mapped);  // one flat-view rebuild per BAR
        mapped.gate->close();
    }
    return std::move(node->function);
}

PciBus::Node& PciBus::add_node(uint8_t devfn, std::shared_ptr<PciFunction> function) {
    if (occupied(devfn))
        throw std::invalid_argument("PCI slot " + name_ + ":" + slot_name(devfn) + " is taken");
    auto node = std::make_unique<Node>();
    for (const Bar& bar : function->bars()) {
        const std::string region_name =
            fmt::format("pci {}:{} BAR{}", name_, slot_name(devfn), bar.index);
        auto gate = std::make_shared<BarGate>(bar.handler);
        RegionId id;
        // Registered unmapped: a BAR decodes only once the guest assigns and enables it.
        if (bar.kind == BarKind::Io) {
            id = pio_.add(PioPort(0), bar.size, gate, region_name);
            pio_.update(id, PioPort(0), false);
        } else {
            id = mmio_.add(GuestAddr(0), bar.size, gate, region_name);
            mmio_.update(id, GuestAddr(0), false);
        }
        node->bars.push_back({bar, std::move(gate), id, std::nullopt});
    }
    node->function = std::move(function);
    nodes_[devfn] = std::move(node);
    return *nodes_[devfn];
}

void PciBus::attach(uint8_t devfn, std::shared_ptr<PciFunction> function) {
    add_node(devfn, std::move(function));
}

PciBus& PciBus::attach_port(uint8_t devfn, std::shared_ptr<RootPort> port) {
    Node& node = add_node(devfn, port);
    node.port = std::move(port);
    node.secondary = std::make_unique<PciBus>(mmio_, pio_, name_ + "/" + slot_name(devfn));
    return *node.secondary;
}

PciBus* PciBus::route(uint8_t number, uint8_t own_number) {
    if (number == own_number) return this;
    for (auto& node : nodes_) {
        if (!node || !node->port) continue;
        const uint8_t secondary = node->port->secondary_bus();
        // Requiring secondary > own_number keeps a misprogrammed loop from recursing forever.
        if (secondary > own_number && secondary <= number &&
            number <= node->port->subordinate_bus())
            return node->secondary->route(number, secondary);
    }
    return nullptr;
}

bool PciBus::slot_is_multifunction(uint8_t devfn) const {
    const uint8_t first = devfn & ~7;
    int functions = 0;
    for (uint8_t f = 0; f < 8; ++f) functions += occupied(first + f);
    return functions > 1;
}

bool PciBus::config_read(uint8_t devfn, uint16_t offset, std::span<uint8_t> data) {
    if (!occupied(devfn)) return false;
    nodes_[devfn]->function->config_read(offset, data);
    // The bus knows which slots hold several functions; their headers say so.
    if (offset <= reg::kHeaderType && reg::kHeaderType < offset + data.size() &&
        slot_is_multifunction(devfn))
        data[reg::kHeaderType - offset] |= kHeaderTypeMultiFunction;
    return true;
}

bool PciBus::config_write(uint8_t devfn, uint16_t offset, std::span<const uint8_t> data) {
    if (!occupied(devfn)) return false;
    nodes_[devfn]->function->config_write(offset, data);
    return true;
}

std::optional<uint64_t> PciBus::decoded_base(PciFunction& function, const Bar& bar,
                                             uint16_t command, const Forwards& upstream) const {
    const uint16_t offset = reg::kBar0 + 4 * bar.index;
    const auto low = read_config<uint32_t>(function, offset);
    uint64_t base = 0;
    bool enabled = false;
    switch (bar.kind) {
        case BarKind::Io:
            base = low & ~uint32_t{0x3};
            enabled = (command & command::kIoSpace) && base + bar.size <= 0x1'0000;
            break;
        case BarKind::Memory32:
            base = low & ~uint32_t{0xf};
            enabled = command & command::kMemorySpace;
            break;
        case BarKind::Memory64:
            base = (low & ~uint64_t{0xf}) | uint64_t{read_config<uint32_t>(function, offset + 4)}
                                                << 32;
            enabled = command & command::kMemorySpace;
            break;
    }
    // Address 0 means "not assigned yet": mapping it would shadow whatever lives at 0.
    if (!enabled || base == 0 || !upstream(bar.kind, base, bar.size)) return std::nullopt;
    return base;
}

void PciBus::map(MappedBar& mapped, std::optional<uint64_t> base) {
    const uint64_t at = base.value_or(0);
    if (mapped.bar.kind == BarKind::Io)
        pio_.update(mapped.region, PioPort(static_cast<uint16_t>(at)), base.has_value());
    else
        mmio_.update(mapped.region, GuestAddr(at), base.has_value());
    mapped.base = base;
}

void PciBus::sync_mappings(const Forwards& upstream) {
    for (auto& node : nodes_) {
        if (!node) continue;
        PciFunction& function = *node->function;
        const auto command = read_config<uint16_t>(function, reg::kCommand);
        for (auto& mapped : node->bars) {
            const auto base = decoded_base(function, mapped.bar, command, upstream);
            if (base == mapped.base) continue;
            map(mapped, base);
            function.bar_mapped(mapped.bar.index, base);
        }
        if (node->port) {
            const RootPort& port = *node->port;
            node->secondary->sync_mappings([&](BarKind kind, uint64_t base, uint64_t size) {
                return upstream(kind, base, size) && port.forwards(kind, base, size);
            });
        }
    }
}

}  // namespace mvmm::devices::pci
