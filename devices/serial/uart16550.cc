#include "devices/serial/uart16550.h"

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace mvmm::devices {

namespace {

// Register offsets (DLAB = LCR bit 7 selects the divisor latch at 0 and 1).
constexpr uint8_t kData = 0, kIer = 1, kIirFcr = 2, kLcr = 3, kMcr = 4, kLsr = 5, kMsr = 6,
                  kScr = 7;
constexpr uint8_t kLcrDlab = 0x80;
constexpr uint8_t kIerRxData = 0x01, kIerThrEmpty = 0x02;
constexpr uint8_t kIirNone = 0x01, kIirThrEmpty = 0x02, kIirRxData = 0x04, kIirFifos = 0xc0;
constexpr uint8_t kFcrEnable = 0x01, kFcrClearRx = 0x02;
constexpr uint8_t kLsrDataReady = 0x01, kLsrThrEmpty = 0x20, kLsrTxIdle = 0x40;
constexpr uint8_t kMcrLoopback = 0x10;
constexpr uint8_t kMsrCts = 0x10, kMsrDsr = 0x20, kMsrDcd = 0x80;
constexpr size_t kRxFifoLimit = 4096;

}  // namespace

Uart16550::Uart16550(Platform& platform, uint32_t irq, int output_fd, TransmitTap tap)
    : platform_(platform), irq_(irq), output_fd_(output_fd), tap_(std::move(tap)) {}

void Uart16550::read(uint64_t offset, std::span<uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) data[i] = read_register(uint8_t((offset + i) & 7));
    update_interrupt();
}

void Uart16550::write(uint64_t offset, std::span<const uint8_t> data) {
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < data.size(); ++i) write_register(uint8_t((offset + i) & 7), data[i]);
    update_interrupt();
}

void Uart16550::receive(std::span<const uint8_t> bytes) {
    std::lock_guard lock(mutex_);
    for (uint8_t b : bytes)
        if (rx_.size() < kRxFifoLimit) rx_.push_back(b);
    update_interrupt();
}

uint8_t Uart16550::read_register(uint8_t reg) {
    const bool dlab = lcr_ & kLcrDlab;
    switch (reg) {
        case kData:
            if (dlab) return dll_;
            if (rx_.empty()) return 0;
            {
                uint8_t b = rx_.front();
                rx_.pop_front();
                return b;
            }
        case kIer:
            return dlab ? dlm_ : ier_;
        case kIirFcr: {
            uint8_t iir = kIirNone;
            if ((ier_ & kIerRxData) && !rx_.empty()) {
                iir = kIirRxData;
            } else if ((ier_ & kIerThrEmpty) && thr_interrupt_) {
                iir = kIirThrEmpty;
                thr_interrupt_ = false;  // reading IIR acknowledges THRE
            }
            return iir | (fifo_enabled_ ? kIirFifos : 0);
        }
        case kLcr:
            return lcr_;
        case kMcr:
            return mcr_;
        case kLsr:
            return (rx_.empty() ? 0 : kLsrDataReady) | kLsrThrEmpty | kLsrTxIdle;
        case kMsr:
            if (mcr_ & kMcrLoopback) {
                // Loopback wires DTR->DSR, RTS->CTS, OUT1->RI, OUT2->DCD.
                uint8_t m = mcr_ & 0x0f;
                return uint8_t(((m & 0x1) << 5) | ((m & 0x2) << 3) | ((m & 0x4) << 4) |
                               ((m & 0x8) << 4));
            }
            return kMsrDcd | kMsrDsr | kMsrCts;
        case kScr:
            return scr_;
    }
    return 0xff;
}

void Uart16550::write_register(uint8_t reg, uint8_t value) {
    const bool dlab = lcr_ & kLcrDlab;
    switch (reg) {
        case kData:
            if (dlab) {
                dll_ = value;
            } else if (mcr_ & kMcrLoopback) {
                if (rx_.size() < kRxFifoLimit) rx_.push_back(value);
                thr_interrupt_ = true;
            } else {
                transmit(value);
            }
            break;
        case kIer:
            if (dlab) {
                dlm_ = value;
            } else {
                // Enabling THRE interrupts while the THR is empty raises one at once.
                if ((value & kIerThrEmpty) && !(ier_ & kIerThrEmpty)) thr_interrupt_ = true;
                ier_ = value & 0x0f;
            }
            break;
        case kIirFcr:
            fifo_enabled_ = value & kFcrEnable;
            if (value & kFcrClearRx) rx_.clear();
            break;
        case kLcr:
            lcr_ = value;
            break;
        case kMcr:
            mcr_ = value & 0x1f;
            break;
        case kScr:
            scr_ = value;
            break;
        default:
            break;  // LSR and MSR are read-only
    }
}

void Uart16550::transmit(uint8_t byte) {
    // Writing THR acknowledges THRE; it is empty again at once, so the line drops and
    // rises, giving the edge-triggered ISA interrupt a fresh edge for every byte.
    thr_interrupt_ = false;
    update_interrupt();
    while (::write(output_fd_, &byte, 1) < 0 && errno == EINTR) {
    }
    if (tap_) tap_(byte);
    thr_interrupt_ = true;
}

void Uart16550::update_interrupt() {
    bool level = ((ier_ & kIerRxData) && !rx_.empty()) || ((ier_ & kIerThrEmpty) && thr_interrupt_);
    if (level != irq_level_) {
        irq_level_ = level;
        platform_.set_irq_line(irq_, level);
    }
}

}  // namespace mvmm::devices
