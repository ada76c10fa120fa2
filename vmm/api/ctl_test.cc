// tools/mvmm-ctl against a real server; meson passes the tool's path in MVMM_CTL.
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <thread>
#include <vector>

#include "vmm/api/test_support.h"

namespace mvmm::api {
namespace {

using nlohmann::json;
using test_support::RunningServer;
using test_support::TempDir;

struct CtlRun {
    int exit_code = -1;
    std::string out;  // stdout only

    json reply() const { return json::parse(out); }
};

std::string shell_quote(const std::string& word) {
    std::string quoted = "'";
    for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return quoted + "'";
}

// Starts mvmm-ctl with `args`; finish() waits for it.
class Ctl {
  public:
    explicit Ctl(const std::vector<std::string>& args) {
        const char* tool = std::getenv("MVMM_CTL");
        if (tool == nullptr) throw std::runtime_error("MVMM_CTL is not set (run via meson test)");
        std::string command = shell_quote(tool);
        for (const std::string& arg : args) command += " " + shell_quote(arg);
        pipe_ = ::popen((command + " 2>/dev/null").c_str(), "r");
        if (pipe_ == nullptr) throw std::runtime_error("popen " + command);
    }
    ~Ctl() {
        if (pipe_ != nullptr) ::pclose(pipe_);
    }
    Ctl(const Ctl&) = delete;
    Ctl& operator=(const Ctl&) = delete;

    CtlRun finish() {
        CtlRun run;
        char chunk[4096];
        for (std::size_t got; (got = std::fread(chunk, 1, sizeof chunk, pipe_)) > 0;) {
            run.out.append(chunk, got);
        }
        const int status = ::pclose(std::exchange(pipe_, nullptr));
        if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
        return run;
    }

  private:
    FILE* pipe_ = nullptr;
};

CtlRun ctl(const std::vector<std::string>& args) {
    return Ctl(args).finish();
}

TEST(MvmmCtl, ReturnExitsZero) {
    RunningServer server;
    const CtlRun run = ctl({"--socket", server.socket_path(), "query-status"});
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_EQ(run.reply()["return"]["status"], "running");
    EXPECT_EQ(ctl({"--socket", server.socket_path(), "query-memory"}).exit_code, 0);
}

TEST(MvmmCtl, ErrorReplyExitsOne) {
    RunningServer server;
    const CtlRun unknown = ctl({"--socket", server.socket_path(), "stop"});
    EXPECT_EQ(unknown.exit_code, 1);
    EXPECT_EQ(unknown.reply()["error"]["class"], "CommandNotFound");
    const CtlRun bad_argument =
        ctl({"--socket", server.socket_path(), "query-status", "--arguments", R"({"x": 1})"});
    EXPECT_EQ(bad_argument.exit_code, 1);
    EXPECT_EQ(bad_argument.reply()["error"]["class"], "GenericError");
}

TEST(MvmmCtl, KeyValueItemsBecomeArguments) {
    RunningServer server;
    const CtlRun run = ctl({"--socket", server.socket_path(), "add-disk", "path=a.img", "queues=2",
                            "readonly=on", "--arguments", R"({"serial": "s1"})"});
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_EQ(run.reply()["return"]["added"],
              (json{{"path", "a.img"}, {"queues", 2}, {"readonly", "on"}, {"serial", "s1"}}));
    EXPECT_EQ(ctl({"--socket", server.socket_path(), "remove-disk", "disk1"}).exit_code, 2);
}

TEST(MvmmCtl, UsageAndConnectionProblemsExitTwo) {
    RunningServer server;
    EXPECT_EQ(ctl({"--socket", server.socket_path()}).exit_code, 2);  // no command
    EXPECT_EQ(ctl({"query-status"}).exit_code, 2);                    // no socket
    EXPECT_EQ(ctl({"--socket", server.socket_path(), "quit", "--arguments", "[1]"}).exit_code, 2);
    EXPECT_EQ(ctl({"--socket", server.socket_path(), "quit", "--wait", "soon"}).exit_code, 2);
    EXPECT_EQ(server.handler.quits, 0);
    TempDir dir;
    const CtlRun missing = ctl({"--socket", (dir.path() / "none.sock").string(), "query-status"});
    EXPECT_EQ(missing.exit_code, 2);
    EXPECT_TRUE(missing.out.empty());
}

TEST(MvmmCtl, QuitReachesTheHandler) {
    RunningServer server;
    const CtlRun run = ctl({"--socket", server.socket_path(), "quit"});
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_EQ(run.reply(), (json{{"return", json::object()}}));
    EXPECT_TRUE(test_support::eventually([&] { return server.handler.quits == 1; }));
}

// QEMU's side of QMP: a greeting, capabilities negotiation, then an event before the reply.
TEST(MvmmCtl, QmpNegotiatesAndSkipsEvents) {
    TempDir dir;
    const std::string path = (dir.path() / "qmp.sock").string();
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    path.copy(address.sun_path, sizeof address.sun_path - 1);
    ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(::listen(listener.get(), 1), 0);
    std::vector<std::string> received;
    std::jthread qemu([&] {
        const Fd client(::accept(listener.get(), nullptr, nullptr));
        const auto send = [&](std::string_view text) {
            ::send(client.get(), text.data(), text.size(), MSG_NOSIGNAL);
        };
        const auto receive = [&] {
            std::string line;
            for (char c; ::recv(client.get(), &c, 1, 0) == 1 && c != '\n';) line += c;
            return line;
        };
        send(R"({"QMP": {"version": {}, "capabilities": []}})"
             "\n");
        received.push_back(receive());
        send(R"({"return": {}})"
             "\n");
        received.push_back(receive());
        send(R"({"event": "DEVICE_DELETED", "data": {}})"
             "\n"
             R"({"return": {"status": "running"}})"
             "\n");
    });
    const CtlRun run = ctl({"--qmp", "--socket", path, "query-status"});
    qemu.join();
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_EQ(run.reply()["return"]["status"], "running");
    ASSERT_EQ(received.size(), 2u);
    EXPECT_EQ(json::parse(received[0])["execute"], "qmp_capabilities");
    EXPECT_EQ(json::parse(received[1])["execute"], "query-status");
}

TEST(MvmmCtl, WaitsForTheSocketToAppear) {
    TempDir dir;
    const std::string path = (dir.path() / "later.sock").string();
    Ctl waiting({"--socket", path, "--wait", "10", "query-status"});
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    RunningServer server(path);
    const CtlRun run = waiting.finish();
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_EQ(run.reply()["return"]["cpus"], 2);
}

}  // namespace
}  // namespace mvmm::api
