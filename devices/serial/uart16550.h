// A 16550A UART: enough for Linux's 8250 driver (FIFO detection, loopback self-test,
// THRE and receive interrupts) and an interactive console.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>

#include "devices/bus/address_space.h"
#include "devices/platform.h"

namespace mvmm::devices {

class Uart16550 : public IoHandler {
  public:
    // Transmitted bytes are written to `output_fd` and, when `tap` is set, handed to it too
    // (under the UART's lock, in order); the interrupt is raised on `irq`.
    using TransmitTap = std::function<void(uint8_t)>;
    Uart16550(Platform& platform, uint32_t irq, int output_fd, TransmitTap tap = {});

    void read(uint64_t offset, std::span<uint8_t> data) override;
    void write(uint64_t offset, std::span<const uint8_t> data) override;

    // Bytes typed at the console (called from the input thread).
    void receive(std::span<const uint8_t> bytes);

  private:
    uint8_t read_register(uint8_t reg);
    void write_register(uint8_t reg, uint8_t value);
    void transmit(uint8_t byte);
    void update_interrupt();  // requires mutex_

    Platform& platform_;
    uint32_t irq_;
    int output_fd_;
    TransmitTap tap_;

    std::mutex mutex_;
    std::deque<uint8_t> rx_;
    uint8_t ier_ = 0, lcr_ = 0, mcr_ = 0, scr_ = 0, dll_ = 0x0c, dlm_ = 0;
    bool fifo_enabled_ = false;
    bool thr_interrupt_ = false;  // THR empty, not yet acknowledged by an IIR read
    bool irq_level_ = false;
};

}  // namespace mvmm::devices
