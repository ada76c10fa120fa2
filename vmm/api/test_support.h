// Shared by the management socket tests: a fake machine, a running server on a temporary
// socket and a blocking client that gives up rather than hang a broken test.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "base/fd.h"
#include "vmm/api/handler.h"
#include "vmm/api/server.h"

namespace mvmm::api::test_support {

class FakeHandler : public ApiHandler {
  public:
    nlohmann::json query_status() override;
    nlohmann::json query_disk_caches() override { return {{"resident_bytes", 4096}}; }
    // {"path": path, "size_bytes": 4096} for "disk.img"; throws std::invalid_argument for any
    // other path.
    nlohmann::json resize_disk(const std::string& path) override;
    // The disk commands echo what they were given.
    nlohmann::json add_disk(const nlohmann::json& arguments) override {
        return {{"added", arguments}};
    }
    nlohmann::json remove_disk(const nlohmann::json& arguments) override {
        return {{"removing", arguments}};
    }
    nlohmann::json query_disks() override { return {{"disks", nlohmann::json::array()}}; }
    void quit() override { ++quits; }

    std::atomic<int> quits{0};
    std::atomic<bool> status_fails{false};  // query_status() throws
};

// A fresh directory under the system's temporary directory, removed with its contents.
class TempDir {
  public:
    TempDir();
    ~TempDir();
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
};

// An ApiServer with a FakeHandler, its io_context run by two threads.
class RunningServer {
  public:
    RunningServer();  // on a socket in a TempDir of its own
    explicit RunningServer(const std::string& socket_path);
    ~RunningServer();  // joins the threads before destroying the server, as the server asks

    std::string socket_path() const { return server_->socket_path(); }

    FakeHandler handler;

  private:
    void start(const std::string& socket_path);

    TempDir dir_;
    boost::asio::io_context io_;
    std::optional<ApiServer> server_;
    std::vector<std::jthread> threads_;
};

// Polls `done` until it holds or `timeout` passes; returns its last value.
bool eventually(const std::function<bool()>& done,
                std::chrono::milliseconds timeout = std::chrono::seconds(5));

class Client {
  public:
    // Throws std::system_error when it cannot connect.
    explicit Client(const std::string& socket_path,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));

    void send(std::string_view bytes);
    // The next line without its newline; nullopt once the server closed the connection.
    // Throws std::runtime_error when nothing arrives within the timeout.
    std::optional<std::string> read_line();
    // Sends `request` as one line and parses the reply line.
    nlohmann::json request(const nlohmann::json& request);

    int fd() const { return fd_.get(); }

  private:
    Fd fd_;
    std::string received_;  // read but not yet returned
};

}  // namespace mvmm::api::test_support
