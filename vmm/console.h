// The host side of the serial console: guest output to stdout or a file, keyboard input
// from stdin (raw mode when stdin is a terminal) fed to the UART by a thread of its own.
#pragma once

#include <termios.h>

#include <functional>
#include <optional>
#include <span>
#include <thread>

#include "base/fd.h"
#include "vmm/cli/config.h"

namespace mvmm {

class Console {
  public:
    // Opens (creates) the output file, but leaves its contents alone until start(): a run that
    // fails before the guest starts does not wipe the last run's log.
    explicit Console(const SerialConfig& config);
    ~Console();
    Console(const Console&) = delete;
    Console& operator=(const Console&) = delete;

    int output_fd() const noexcept;
    // The guest starts: empties the output file, or starts forwarding stdin to `sink` (raw
    // mode on a terminal) for the stdio console.
    void start(std::function<void(std::span<const uint8_t>)> sink);

  private:
    Fd file_;
    bool stdio_;
    std::optional<termios> saved_termios_;
    EventFd stop_;
    std::jthread input_thread_;
};

}  // namespace mvmm
