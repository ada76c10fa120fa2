#include "devices/pci/config_access.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

namespace mvmm::devices::pci {

namespace {

constexpr uint64_t kResetControlOffset = 1;  // port 0xCF9
constexpr uint64_t kConfigDataOffset = 4;
constexpr uint32_t kConfigEnable = 1u << 31;

bool naturally_aligned(uint64_t offset, size_t size) {
    return (size == 1 || size == 2 || size == 4) && offset % size == 0;
}

// MMCONFIG: bus << 20 | device << 15 | function << 12 | register.
class EcamHandler final : public IoHandler {
  public:
    explicit EcamHandler(ConfigCycles& cycles) : cycles_(cycles) {}
    void read(uint64_t offset, std::span<uint8_t> data) override {
        if (naturally_aligned(offset, data.size()))
            cycles_.config_read(offset >> 20, (offset >> 12) & 0xff, offset & 0xfff, data);
        else
            std::ranges::fill(data, 0xff);
    }
    void write(uint64_t offset, std::span<const uint8_t> data) override {
        if (naturally_aligned(offset, data.size()))
            cycles_.config_write(offset >> 20, (offset >> 12) & 0xff, offset & 0xfff, data);
    }

  private:
    ConfigCycles& cycles_;
};

// Ports 0xCF8-0xCFF: CONFIG_ADDRESS (dword only) and CONFIG_DATA (any access in the dword).
class LegacyConfigHandler final : public IoHandler {
  public:
    LegacyConfigHandler(ConfigCycles& cycles, std::shared_ptr<IoHandler> reset_control)
        : cycles_(cycles), reset_control_(std::move(reset_control)) {}

    void read(uint64_t offset, std::span<uint8_t> data) override {
        if (offset == 0 && data.size() == 4) {
            const uint32_t v = address_.load();
            std::memcpy(data.data(), &v, 4);
        } else if (auto cycle = data_cycle(offset, data.size())) {
            cycles_.config_read(cycle->bus, cycle->devfn, cycle->offset, data);
        } else if (is_reset_control(offset, data.size())) {
            reset_control_->read(0, data);
        } else {
            std::ranges::fill(data, 0xff);
        }
    }

    void write(uint64_t offset, std::span<const uint8_t> data) override {
        if (offset == 0 && data.size() == 4) {
            uint32_t v;
            std::memcpy(&v, data.data(), 4);
            address_.store(v & (kConfigEnable | 0x00ff'fffc));  // reserved bits read 0
        } else if (auto cycle = data_cycle(offset, data.size())) {
            cycles_.config_write(cycle->bus, cycle->devfn, cycle->offset, data);
        } else if (is_reset_control(offset, data.size())) {
            reset_control_->write(0, data);
        }
    }

  private:
    struct Cycle {
        uint8_t bus;
        uint8_t devfn;
        uint16_t offset;
    };
    // The config cycle a CONFIG_DATA access at `offset` makes, if CONFIG_ADDRESS enables one.
    std::optional<Cycle> data_cycle(uint64_t offset, size_t size) const {
        const uint32_t address = address_.load();
        if (offset < kConfigDataOffset || offset + size > kConfigDataOffset + 4 ||
            !(address & kConfigEnable))
            return std::nullopt;
        return Cycle{static_cast<uint8_t>(address >> 16), static_cast<uint8_t>(address >> 8),
                     static_cast<uint16_t>((address & 0xfc) + offset - kConfigDataOffset)};
    }
    bool is_reset_control(uint64_t offset, size_t size) const {
        return reset_control_ && offset == kResetControlOffset && size == 1;
    }

    ConfigCycles& cycles_;
    std::shared_ptr<IoHandler> reset_control_;
    std::atomic<uint32_t> address_{0};
};

}  // namespace

std::shared_ptr<IoHandler> make_ecam_handler(ConfigCycles& cycles) {
    return std::make_shared<EcamHandler>(cycles);
}

std::shared_ptr<IoHandler> make_legacy_config_handler(ConfigCycles& cycles,
                                                      std::shared_ptr<IoHandler> reset_control) {
    return std::make_shared<LegacyConfigHandler>(cycles, std::move(reset_control));
}

}  // namespace mvmm::devices::pci
