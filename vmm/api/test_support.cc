#include "vmm/api/test_support.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace mvmm::api::test_support {

nlohmann::json FakeHandler::query_status() {
    if (status_fails) throw std::runtime_error("the machine is on fire");
    return {{"status", "running"}, {"cpus", 2}, {"uptime_ms", 1234}};
}

nlohmann::json FakeHandler::resize_disk(const std::string& path) {
    if (path != "disk.img") throw std::invalid_argument("no --disk has path=" + path);
    return {{"path", path}, {"size_bytes", 4096}};
}

TempDir::TempDir() {
    // Short on purpose: a socket path must fit in 107 bytes.
    std::string pattern = (std::filesystem::temp_directory_path() / "mvmm-api-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw_errno("mkdtemp " + pattern);
    path_ = pattern;
}

TempDir::~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
}

RunningServer::RunningServer() {
    start((dir_.path() / "api.sock").string());
}

RunningServer::RunningServer(const std::string& socket_path) {
    start(socket_path);
}

void RunningServer::start(const std::string& socket_path) {
    server_.emplace(io_, socket_path, handler);
    for (int i = 0; i < 2; ++i) threads_.emplace_back([this] { io_.run(); });
}

RunningServer::~RunningServer() {
    io_.stop();
    threads_.clear();
    server_.reset();
}

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
}

Client::Client(const std::string& socket_path, std::chrono::milliseconds timeout)
    : fd_(static_cast<int>(
          check_syscall(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), "socket"))) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    socket_path.copy(address.sun_path, sizeof address.sun_path - 1);
    check_syscall(::connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof address),
                  "connect " + socket_path);
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout).count();
    const timeval limit{micros / 1000000, micros % 1000000};
    check_syscall(::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit),
                  "SO_RCVTIMEO");
}

void Client::send(std::string_view bytes) {
    while (!bytes.empty()) {
        const ssize_t sent = ::send(fd_.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL);
        check_syscall(sent, "send");
        bytes.remove_prefix(static_cast<std::size_t>(sent));
    }
}

std::optional<std::string> Client::read_line() {
    for (;;) {
        if (const auto newline = received_.find('\n'); newline != std::string::npos) {
            std::string line = received_.substr(0, newline);
            received_.erase(0, newline + 1);
            return line;
        }
        char chunk[4096];
        const ssize_t got = ::recv(fd_.get(), chunk, sizeof chunk, 0);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            throw std::runtime_error("no reply line within the timeout");
        }
        if (got < 0 && errno == ECONNRESET) return std::nullopt;
        check_syscall(got, "recv");
        if (got == 0) return std::nullopt;
        received_.append(chunk, static_cast<std::size_t>(got));
    }
}

nlohmann::json Client::request(const nlohmann::json& request) {
    send(request.dump() + "\n");
    const std::optional<std::string> line = read_line();
    if (!line) throw std::runtime_error("the server closed the connection instead of replying");
    return nlohmann::json::parse(*line);
}

}  // namespace mvmm::api::test_support
