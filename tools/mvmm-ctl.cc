// mvmm-ctl: sends one command to mvmm's management socket (--api-socket) and prints the reply.
//   mvmm-ctl --socket PATH COMMAND [KEY=VALUE...] [--arguments JSON] [--wait SECONDS]
//            [--timeout SECONDS]
// KEY=VALUE items join the arguments: a VALUE that is a JSON number is sent as one, anything
// else as a string ("mvmm-ctl --socket S add-disk path=a.img readonly=on", "remove-disk
// id=disk2", "add-disk path=b.img controller=c0 lun=1" for a SCSI LUN, "remove-disk id=c0:0:1",
// "set-memory-policy trim-policy=adaptive trim-factor=50").
// --qmp talks to a QEMU QMP socket instead (boot-bench drives QEMU's hot-plug with it): it reads
// the greeting, negotiates capabilities, sends the command and skips event lines until the reply.
// Exit status: 0 for a "return" reply, 1 for an "error" reply, 2 for usage and connection
// problems.  Only header-only libraries besides libstdc++, so the binary can be copied next to
// mvmm into a test VM.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "base/fd.h"

namespace {

using Clock = std::chrono::steady_clock;
using mvmm::Fd;

constexpr int kExitReturn = 0;
constexpr int kExitErrorReply = 1;
constexpr int kExitUsage = 2;
constexpr std::size_t kMaxReplyBytes = 16 << 20;  // far beyond any reply: a runaway peer

// Usage and connection problems: the message is for the user.
class CtlError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

std::string errno_message(int err = errno) {
    return std::system_category().message(err);
}

// Retries while the socket does not exist yet or nobody listens on it, until `deadline`.
Fd connect_to(const std::string& path, Clock::time_point deadline) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.empty() || path.size() >= sizeof address.sun_path) {
        throw CtlError("socket path '" + path + "' must be 1 to " +
                       std::to_string(sizeof address.sun_path - 1) + " bytes long");
    }
    path.copy(address.sun_path, sizeof address.sun_path - 1);
    for (;;) {
        Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (!fd.valid()) throw CtlError("socket: " + errno_message());
        if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
            return fd;
        }
        const int err = errno;
        const bool not_up_yet = err == ENOENT || err == ECONNREFUSED;
        if (!not_up_yet || Clock::now() >= deadline) {
            throw CtlError("cannot connect to " + path + ": " + errno_message(err));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

void send_all(const Fd& fd, std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t sent = ::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0) throw CtlError("sending the command: " + errno_message());
        bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
}

// Lines off the socket; what follows a newline waits for the next call.
class LineReader {
  public:
    explicit LineReader(const Fd& fd) : fd_(fd) {}

    std::string next(Clock::time_point deadline) {
        for (;;) {
            if (const auto newline = buffer_.find('\n'); newline != std::string::npos) {
                std::string line = buffer_.substr(0, newline);
                buffer_.erase(0, newline + 1);
                return line;
            }
            if (buffer_.size() > kMaxReplyBytes) throw CtlError("the reply is too long");
            receive(deadline);
        }
    }

  private:
    void receive(Clock::time_point deadline) {
        for (;;) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
            pollfd readable{fd_.get(), POLLIN, 0};
            const int ready =
                ::poll(&readable, 1, static_cast<int>(std::max<long>(left.count(), 0)));
            if (ready < 0 && errno == EINTR) continue;
            if (ready < 0) throw CtlError("waiting for the reply: " + errno_message());
            if (ready == 0) throw CtlError("no reply within the timeout");
            char chunk[4096];
            const ssize_t got = ::recv(fd_.get(), chunk, sizeof chunk, 0);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) throw CtlError("reading the reply: " + errno_message());
            if (got == 0) throw CtlError("the connection closed before a reply");
            buffer_.append(chunk, static_cast<std::size_t>(got));
            return;
        }
    }

    const Fd& fd_;
    std::string buffer_;
};

// Adds KEY=VALUE to `arguments`.
void add_item(nlohmann::json& arguments, const std::string& item) {
    const auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0)
        throw CtlError("'" + item + "' is not KEY=VALUE");
    const std::string value = item.substr(equals + 1);
    const auto number = nlohmann::json::parse(value, nullptr, false);
    arguments[item.substr(0, equals)] = number.is_number() ? number : nlohmann::json(value);
}

// A QMP reply line, not an {"event": ...} or the {"QMP": ...} greeting.
bool is_reply(const nlohmann::json& line) {
    return line.is_object() && (line.contains("return") || line.contains("error"));
}

std::chrono::milliseconds seconds(double value) {
    return std::chrono::milliseconds(static_cast<long>(value * 1000));
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "Send one command to mvmm's management socket and print the JSON reply.\n"
        "Exit status: 0 return, 1 error reply, 2 usage or connection problem."};
    std::string socket_path;
    std::string command;
    std::string arguments_text = "{}";
    std::vector<std::string> items;
    double wait_seconds = 0;
    double timeout_seconds = 30;
    bool qmp = false;
    app.add_option("--socket", socket_path, "mvmm's --api-socket path")->required();
    app.add_option("command", command,
                   "query-status, query-memory, trim-memory, query-memory-policy, "
                   "set-memory-policy, query-disks, add-disk (a virtio-blk disk, or a SCSI LUN "
                   "with controller=ID), remove-disk (id=diskN, or id=ID:T:L for a LUN), "
                   "resize-disk, quit")
        ->required();
    app.add_option("items", items, "KEY=VALUE arguments (added to --arguments)");
    app.add_option("--arguments", arguments_text, "the command's arguments, a JSON object");
    app.add_option("--wait", wait_seconds, "keep trying to connect this long (mvmm starting up)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--qmp", qmp, "the socket is QEMU's QMP: negotiate, then skip events");
    app.add_option("--timeout", timeout_seconds, "give up on the reply after this long")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        const int code = app.exit(e);
        return code == 0 ? kExitReturn : kExitUsage;
    }

    try {
        nlohmann::json arguments = nlohmann::json::parse(arguments_text, nullptr, false);
        if (!arguments.is_object()) throw CtlError("--arguments must be a JSON object");
        for (const auto& item : items) add_item(arguments, item);
        nlohmann::json request = {{"execute", command}};
        if (!arguments.empty()) request["arguments"] = arguments;

        const Fd fd = connect_to(socket_path, Clock::now() + seconds(wait_seconds));
        const auto deadline = Clock::now() + seconds(timeout_seconds);
        LineReader lines(fd);
        if (qmp) {
            lines.next(deadline);  // the greeting
            send_all(fd, R"({"execute": "qmp_capabilities"})"
                         "\n");
            while (!is_reply(nlohmann::json::parse(lines.next(deadline), nullptr, false))) {
            }
        }
        send_all(fd, request.dump() + "\n");
        std::string line = lines.next(deadline);
        nlohmann::json reply = nlohmann::json::parse(line, nullptr, false);
        while (qmp && !is_reply(reply)) {
            line = lines.next(deadline);
            reply = nlohmann::json::parse(line, nullptr, false);
        }
        if (!reply.is_object() || !(reply.contains("return") || reply.contains("error"))) {
            throw CtlError("not a reply: " + line);
        }
        std::cout << reply.dump() << std::endl;
        return reply.contains("return") ? kExitReturn : kExitErrorReply;
    } catch (const CtlError& e) {
        std::cerr << "mvmm-ctl: " << e.what() << '\n';
        return kExitUsage;
    }
}
