#include "vmm/api/server.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <gtest/gtest.h>

#include <fstream>

#include "rcu/trim.h"
#include "vmm/api/protocol.h"
#include "vmm/api/test_support.h"

namespace mvmm::api {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using test_support::Client;
using test_support::eventually;
using test_support::FakeHandler;
using test_support::RunningServer;
using test_support::TempDir;

const json kQueryStatus = {{"execute", "query-status"}};

TEST(ApiServer, AnswersEveryCommand) {
    RunningServer server;
    Client client(server.socket_path());
    EXPECT_EQ(client.request(kQueryStatus)["return"]["status"], "running");
    EXPECT_TRUE(client.request({{"execute", "query-memory"}})["return"].contains("heap_rss_bytes"));
    const json trimmed = client.request({{"execute", "trim-memory"}});
    EXPECT_TRUE(trimmed.contains(rcu::trim_supported() ? "return" : "error")) << trimmed;
    EXPECT_EQ(client.request({{"execute", "quit"}, {"id", "bye"}}),
              (json{{"return", json::object()}, {"id", "bye"}}));
    // The reply is written first, then the handler is told.
    EXPECT_TRUE(eventually([&] { return server.handler.quits == 1; }));
}

TEST(ApiServer, SocketIsPrivateAndRemovedOnDestruction) {
    std::string path;
    {
        RunningServer server;
        path = server.socket_path();
        struct stat st {};
        ASSERT_EQ(::stat(path.c_str(), &st), 0);
        EXPECT_TRUE(S_ISSOCK(st.st_mode));
        EXPECT_EQ(st.st_mode & 0777, 0600u);
    }
    EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ApiServer, BadRequestsGetErrorsAndTheConnectionStaysUsable) {
    RunningServer server;
    Client client(server.socket_path());
    client.send(
        "nope\n[1]\n{}\n\n  \r\n{\"execute\": \"stop\"}\n{\"execute\": \"query-status\"}\n");
    const char* expected_classes[] = {"InvalidJson", "GenericError", "GenericError",
                                      "CommandNotFound"};
    for (const char* expected : expected_classes) {
        const std::optional<std::string> line = client.read_line();
        ASSERT_TRUE(line);
        EXPECT_EQ(json::parse(*line)["error"]["class"], expected) << *line;
    }
    // Blank lines get no reply: the next one answers query-status.
    const std::optional<std::string> line = client.read_line();
    ASSERT_TRUE(line);
    EXPECT_EQ(json::parse(*line)["return"]["cpus"], 2);
}

TEST(ApiServer, LongestLineIsServed) {
    RunningServer server;
    Client client(server.socket_path());
    const std::string prefix = R"({"execute": "query-status", "id": ")";
    const std::string pad(kMaxLineBytes - prefix.size() - 3, 'x');  // 3: "}, '}', newline
    client.send(prefix + pad + "\"}\n");
    const std::optional<std::string> line = client.read_line();
    ASSERT_TRUE(line);
    EXPECT_EQ(json::parse(*line)["id"], pad);
}

TEST(ApiServer, OversizedLineGetsAnErrorThenClose) {
    RunningServer server;
    Client other(server.socket_path());
    Client client(server.socket_path());
    client.send(std::string(kMaxLineBytes + 100, ' ') + "\n");
    const std::optional<std::string> line = client.read_line();
    ASSERT_TRUE(line);
    EXPECT_EQ(json::parse(*line)["error"]["class"], "InvalidJson");
    EXPECT_FALSE(client.read_line());  // closed
    EXPECT_EQ(other.request(kQueryStatus)["return"]["status"], "running");
    EXPECT_EQ(Client(server.socket_path()).request(kQueryStatus)["return"]["status"], "running");
}

// Sends requests without reading any reply until the server stops taking them; returns the
// bytes it took.
std::size_t flood_without_reading(const Client& client) {
    ::fcntl(client.fd(), F_SETFL, ::fcntl(client.fd(), F_GETFL) | O_NONBLOCK);
    std::string requests;
    while (requests.size() < (1u << 20)) requests += kQueryStatus.dump() + "\n";
    std::size_t taken = 0;
    auto last_progress = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - last_progress < 500ms) {
        const ssize_t sent = ::send(client.fd(), requests.data(), requests.size(), MSG_NOSIGNAL);
        if (sent > 0) {
            taken += static_cast<std::size_t>(sent);
            last_progress = std::chrono::steady_clock::now();
        } else {
            std::this_thread::sleep_for(10ms);
        }
        if (taken > (64u << 20)) break;  // the server never pushed back
    }
    return taken;
}

TEST(ApiServer, StalledClientsDoNotBlockOthers) {
    RunningServer server;
    Client half_line(server.socket_path());
    half_line.send(R"({"execute": "query-)");
    Client never_reads(server.socket_path());
    // Replies pile up in the socket until the server stops reading this client: what it holds
    // for one client is bounded.
    EXPECT_LT(flood_without_reading(never_reads), 64u << 20);

    Client client(server.socket_path(), 1s);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 100; ++i) {
        EXPECT_EQ(client.request({{"execute", "query-status"}, {"id", i}})["id"], i);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

TEST(ApiServer, FiftyConcurrentClients) {
    RunningServer server;
    constexpr int kClients = 50;
    constexpr int kRequests = 20;
    std::atomic<int> answered{0};
    {
        std::vector<std::jthread> clients;
        for (int c = 0; c < kClients; ++c) {
            clients.emplace_back([&, c] {
                Client client(server.socket_path());
                for (int i = 0; i < kRequests; ++i) {
                    const int id = c * kRequests + i;
                    const json reply = client.request({{"execute", "query-status"}, {"id", id}});
                    if (reply["id"] == id && reply["return"]["status"] == "running") ++answered;
                }
            });
        }
    }
    EXPECT_EQ(answered, kClients * kRequests);
}

TEST(ApiServer, ReplacesAStaleSocket) {
    TempDir dir;
    const std::string path = (dir.path() / "api.sock").string();
    {
        // A socket file nobody listens on any more, as a killed mvmm leaves it.
        Fd stale(::socket(AF_UNIX, SOCK_STREAM, 0));
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        path.copy(address.sun_path, sizeof address.sun_path - 1);
        ASSERT_EQ(::bind(stale.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    }
    RunningServer server(path);
    EXPECT_EQ(Client(path).request(kQueryStatus)["return"]["status"], "running");
}

void expect_refused(const std::string& path, const std::string& why) {
    boost::asio::io_context io;
    FakeHandler handler;
    try {
        ApiServer server(io, path, handler);
        ADD_FAILURE() << "listening on " << path;
    } catch (const ApiSocketError& e) {
        EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
}

TEST(ApiServer, RefusesALiveSocket) {
    RunningServer server;
    expect_refused(server.socket_path(), "another process is listening");
    EXPECT_EQ(Client(server.socket_path()).request(kQueryStatus)["return"]["status"], "running");
}

TEST(ApiServer, RefusesUnusablePaths) {
    TempDir dir;
    const std::string file = (dir.path() / "notes.txt").string();
    std::ofstream(file) << "keep me";
    expect_refused(file, "not a socket");
    EXPECT_TRUE(std::filesystem::exists(file));
    expect_refused((dir.path() / "no-such-dir" / "api.sock").string(), "no writable directory");
    expect_refused("/tmp/" + std::string(200, 'x'), "bytes long");
    expect_refused("", "bytes long");
}

TEST(ApiServer, PathsAreCheckedWithoutTouchingThem) {
    TempDir dir;
    const auto path = dir.path() / "api.sock";
    EXPECT_NO_THROW(check_socket_path(path.string()));
    EXPECT_FALSE(std::filesystem::exists(path));
    EXPECT_THROW(check_socket_path((dir.path() / "no-such-dir" / "api.sock").string()),
                 ApiSocketError);
    EXPECT_THROW(check_socket_path(dir.path().string()), ApiSocketError);  // a directory
    EXPECT_THROW(check_socket_path("/tmp/" + std::string(200, 'x')), ApiSocketError);
}

}  // namespace
}  // namespace mvmm::api
