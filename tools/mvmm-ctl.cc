// mvmm-ctl: sends one command to mvmm's management socket (--api-socket) and prints the reply.
//   mvmm-ctl --socket PATH COMMAND [--arguments JSON] [--wait SECONDS] [--timeout SECONDS]
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

std::string read_line(const Fd& fd, Clock::time_point deadline) {
    std::string line;
    for (;;) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd readable{fd.get(), POLLIN, 0};
        const int ready = ::poll(&readable, 1, static_cast<int>(std::max<long>(left.count(), 0)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) throw CtlError("waiting for the reply: " + errno_message());
        if (ready == 0) throw CtlError("no reply within the timeout");
        char chunk[4096];
        const ssize_t got = ::recv(fd.get(), chunk, sizeof chunk, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) throw CtlError("reading the reply: " + errno_message());
        if (got == 0) throw CtlError("the connection closed before a reply");
        line.append(chunk, static_cast<std::size_t>(got));
        if (const auto newline = line.find('\n'); newline != std::string::npos) {
            line.resize(newline);
            return line;
        }
        if (line.size() > kMaxReplyBytes) throw CtlError("the reply is too long");
    }
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
    double wait_seconds = 0;
    double timeout_seconds = 30;
    app.add_option("--socket", socket_path, "mvmm's --api-socket path")->required();
    app.add_option("command", command, "query-status, query-memory, trim-memory, quit, ...")
        ->required();
    app.add_option("--arguments", arguments_text, "the command's arguments, a JSON object");
    app.add_option("--wait", wait_seconds, "keep trying to connect this long (mvmm starting up)")
        ->check(CLI::NonNegativeNumber);
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
        const nlohmann::json arguments = nlohmann::json::parse(arguments_text, nullptr, false);
        if (!arguments.is_object()) throw CtlError("--arguments must be a JSON object");
        nlohmann::json request = {{"execute", command}};
        if (!arguments.empty()) request["arguments"] = arguments;

        const Fd fd = connect_to(socket_path, Clock::now() + seconds(wait_seconds));
        send_all(fd, request.dump() + "\n");
        const std::string line = read_line(fd, Clock::now() + seconds(timeout_seconds));
        const nlohmann::json reply = nlohmann::json::parse(line, nullptr, false);
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
