#include "vmm/console.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "vmm/cli/usage_error.h"

namespace mvmm {

Console::Console(const SerialConfig& config) : stdio_(config.kind == SerialConfig::Kind::Stdio) {
    if (!stdio_) {
        int fd = ::open(config.path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) throw UsageError("cannot open serial output file '" + config.path + "'");
        file_ = Fd(fd);
    }
}

Console::~Console() {
    stop_.signal();
    if (input_thread_.joinable()) input_thread_.join();
    if (saved_termios_) ::tcsetattr(STDIN_FILENO, TCSANOW, &*saved_termios_);
}

int Console::output_fd() const noexcept {
    return stdio_ ? STDOUT_FILENO : file_.get();
}

void Console::start(std::function<void(std::span<const uint8_t>)> sink) {
    if (!stdio_) {
        if (::ftruncate(file_.get(), 0) != 0)
            throw std::system_error(errno, std::generic_category(), "truncating the serial file");
        return;
    }
    if (::isatty(STDIN_FILENO)) {
        // Raw mode: the guest's shell does line editing and sees Ctrl-C.
        termios t;
        if (::tcgetattr(STDIN_FILENO, &t) == 0) {
            saved_termios_ = t;
            ::cfmakeraw(&t);
            t.c_oflag |= OPOST | ONLCR;
            ::tcsetattr(STDIN_FILENO, TCSANOW, &t);
        }
    }
    input_thread_ = std::jthread([this, sink = std::move(sink)] {
        pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
        uint8_t buf[256];
        while (::poll(fds, 2, -1) >= 0 || errno == EINTR) {
            if (fds[1].revents) return;
            if (!(fds[0].revents & (POLLIN | POLLHUP))) continue;
            ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
            if (n <= 0) return;  // end of input: the guest just sees no more keys
            sink({buf, static_cast<size_t>(n)});
        }
    });
}

}  // namespace mvmm
