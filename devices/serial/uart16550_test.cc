// The UART's transmit tap: every byte the guest sends reaches the output and the tap, in order;
// loopback bytes reach neither.
#include "devices/serial/uart16550.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "devices/pci/fake_platform.h"

namespace mvmm::devices {
namespace {

constexpr uint8_t kData = 0, kMcr = 4, kMcrLoopback = 0x10;

class UartTap : public ::testing::Test {
  protected:
    UartTap() {
        EXPECT_EQ(::pipe(pipe_), 0);
        uart_ = std::make_unique<Uart16550>(platform_, 4, pipe_[1],
                                            [this](uint8_t byte) { tapped_ += char(byte); });
    }
    ~UartTap() override {
        ::close(pipe_[0]);
        ::close(pipe_[1]);
    }
    void send(const std::string& text) {
        for (char c : text) uart_->write(kData, std::span<const uint8_t>{(const uint8_t*)&c, 1});
    }
    std::string output(size_t n) {
        std::string out(n, '\0');
        EXPECT_EQ(::read(pipe_[0], out.data(), n), ssize_t(n));
        return out;
    }

    testing::FakePlatform platform_;
    int pipe_[2];
    std::string tapped_;
    std::unique_ptr<Uart16550> uart_;
};

TEST_F(UartTap, SeesWhatTheGuestTransmits) {
    send("MVMM-MARK init 1.0\n");
    EXPECT_EQ(tapped_, "MVMM-MARK init 1.0\n");
    EXPECT_EQ(output(tapped_.size()), tapped_);
}

TEST_F(UartTap, LoopbackBytesAreNotTransmitted) {
    const uint8_t loopback = kMcrLoopback, normal = 0;
    uart_->write(kMcr, {&loopback, 1});
    send("x");
    uart_->write(kMcr, {&normal, 1});
    send("y");
    EXPECT_EQ(tapped_, "y");
}

}  // namespace
}  // namespace mvmm::devices
