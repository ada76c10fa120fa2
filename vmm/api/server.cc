#include "vmm/api/server.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>

#include "vmm/api/protocol.h"

namespace mvmm::api {

namespace {

using boost::asio::local::stream_protocol;
using boost::system::error_code;
using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
// A connection's socket: its handlers run on its own strand.
using ConnectionSocket = boost::asio::basic_stream_socket<stream_protocol, Strand>;

[[noreturn]] void fail(const std::string& path, const std::string& why) {
    throw ApiSocketError("management socket " + path + ": " + why);
}

std::string errno_message() {
    return std::system_category().message(errno);
}

// A socket file whose server died refuses connections; anything else at the path is kept.
void remove_stale_socket(boost::asio::io_context& io, const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        fail(path, errno_message());
    }
    if (!S_ISSOCK(st.st_mode)) fail(path, "the file exists and is not a socket; not replacing it");
    stream_protocol::socket probe(io, stream_protocol());
    probe.non_blocking(true);  // a live server with a full backlog must not stall us
    error_code error;
    probe.connect(stream_protocol::endpoint(path), error);
    if (error == boost::asio::error::connection_refused) {
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            fail(path, "cannot remove the stale socket: " + errno_message());
        }
        return;
    }
    if (!error || error == boost::asio::error::would_block ||
        error == boost::asio::error::try_again || error == boost::asio::error::in_progress) {
        fail(path, "another process is listening on it");
    }
    fail(path, error.message());
}

stream_protocol::acceptor listen_on(boost::asio::io_context& io, const std::string& path) {
    check_socket_path(path);
    remove_stale_socket(io, path);
    stream_protocol::acceptor acceptor(io, stream_protocol());
    // Linux gives the socket file the socket's own mode (minus the umask), so no other user
    // can connect between bind() and the chmod() below.
    if (::fchmod(acceptor.native_handle(), 0600) != 0) fail(path, "fchmod: " + errno_message());
    error_code error;
    acceptor.bind(stream_protocol::endpoint(path), error);
    if (error) fail(path, "cannot bind: " + error.message());
    // The umask may have taken bits away that a client needs.
    std::string why;
    if (::chmod(path.c_str(), 0600) != 0) {
        why = "chmod: " + errno_message();
    } else if (acceptor.listen(stream_protocol::acceptor::max_listen_connections, error); error) {
        why = "listen: " + error.message();
    }
    if (!why.empty()) {
        ::unlink(path.c_str());
        fail(path, why);
    }
    return acceptor;
}

// One client: read a line, execute it, write the reply, then read the next line.
class Connection : public std::enable_shared_from_this<Connection> {
  public:
    Connection(ConnectionSocket socket, ApiHandler& handler)
        : socket_(std::move(socket)), handler_(handler) {}

    void start() { read_request(); }

    // From the connection's strand, or from the server's destructor while nothing runs the
    // io_context.  Handlers that run afterwards do nothing.
    void close() {
        closed_ = true;
        error_code ignored;
        socket_.shutdown(stream_protocol::socket::shutdown_both, ignored);
        socket_.close(ignored);
    }

  private:
    enum class After { read_next, quit, close };

    void read_request() {
        boost::asio::async_read_until(
            socket_, boost::asio::dynamic_buffer(input_, kMaxLineBytes), '\n',
            [self = shared_from_this()](const error_code& error, std::size_t length) {
                self->on_request(error, length);
            });
    }

    void on_request(const error_code& error, std::size_t length) {
        if (closed_) return;
        if (error == boost::asio::error::not_found) {  // the buffer is full and has no newline
            send(error_reply(ErrorClass::InvalidJson, "request line longer than " +
                                                          std::to_string(kMaxLineBytes) +
                                                          " bytes; closing the connection"),
                 After::close);
            return;
        }
        if (error) {  // end of file, a reset, or the server closing
            close();
            return;
        }
        const std::string_view line(input_.data(), length - 1);
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) {  // blank: no reply
            input_.erase(0, length);
            read_request();
            return;
        }
        const Response response = execute_line(line, handler_);
        input_.erase(0, length);
        send(response.reply, response.quit ? After::quit : After::read_next);
    }

    void send(const nlohmann::json& reply, After after) {
        output_ = serialize(reply);
        boost::asio::async_write(
            socket_, boost::asio::buffer(output_),
            [self = shared_from_this(), after](const error_code& error, std::size_t) {
                self->on_sent(error, after);
            });
    }

    void on_sent(const error_code& error, After after) {
        if (closed_) return;
        if (error || after == After::close) {
            close();
            return;
        }
        if (after == After::quit) {
            try {
                handler_.quit();
            } catch (const std::exception& e) {
                spdlog::error("management socket: quit failed: {}", e.what());
            }
        }
        read_request();
    }

    ConnectionSocket socket_;
    ApiHandler& handler_;
    std::string input_;   // at most kMaxLineBytes: the line being read and what follows it
    std::string output_;  // the reply being written
    bool closed_ = false;
};

}  // namespace

void check_socket_path(const std::string& path) {
    if (path.empty() || path.size() >= sizeof(sockaddr_un::sun_path)) {
        fail(path, "the path must be 1 to " + std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                       " bytes long");
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISSOCK(st.st_mode))
        fail(path, "the file exists and is not a socket; not replacing it");
    const auto slash = path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        fail(path, "no writable directory '" + dir + "' to create it in");
}

class ApiServer::Listener : public std::enable_shared_from_this<Listener> {
  public:
    Listener(boost::asio::io_context& io, stream_protocol::acceptor acceptor, ApiHandler& handler)
        : io_(io), acceptor_(std::move(acceptor)), retry_(io), handler_(handler) {}

    void accept() {
        acceptor_.async_accept(
            boost::asio::make_strand(io_),
            [self = shared_from_this()](const error_code& error, ConnectionSocket socket) {
                self->on_accept(error, std::move(socket));
            });
    }

    // Same rules as Connection::close().
    void stop() {
        stopped_ = true;
        error_code ignored;
        acceptor_.close(ignored);
        retry_.cancel();
        for (const auto& weak : connections_) {
            if (auto connection = weak.lock()) connection->close();
        }
    }

  private:
    void on_accept(const error_code& error, ConnectionSocket socket) {
        if (stopped_) return;
        if (error) {
            // E.g. EMFILE: the pending connection stays queued, so retrying at once would spin.
            spdlog::warn("management socket: accept failed: {}", error.message());
            retry_.expires_after(std::chrono::milliseconds(100));
            retry_.async_wait([self = shared_from_this()](const error_code& wait_error) {
                if (!wait_error && !self->stopped_) self->accept();
            });
            return;
        }
        std::erase_if(connections_, [](const auto& weak) { return weak.expired(); });
        auto connection = std::make_shared<Connection>(std::move(socket), handler_);
        connections_.push_back(connection);
        connection->start();
        accept();
    }

    boost::asio::io_context& io_;
    stream_protocol::acceptor acceptor_;
    boost::asio::steady_timer retry_;  // paces accept() after an error
    ApiHandler& handler_;
    bool stopped_ = false;
    // Touched by on_accept() (one accept at a time) and stop() (nothing else running).
    std::vector<std::weak_ptr<Connection>> connections_;
};

ApiServer::ApiServer(boost::asio::io_context& io, const std::string& socket_path,
                     ApiHandler& handler)
    : socket_path_(socket_path) {
    stream_protocol::acceptor acceptor = listen_on(io, socket_path);
    struct stat st {};
    if (::stat(socket_path.c_str(), &st) == 0) {
        socket_device_ = st.st_dev;
        socket_inode_ = st.st_ino;
    }
    listener_ = std::make_shared<Listener>(io, std::move(acceptor), handler);
    listener_->accept();
}

ApiServer::~ApiServer() {
    listener_->stop();
    struct stat st {};
    if (::lstat(socket_path_.c_str(), &st) == 0 && st.st_dev == socket_device_ &&
        st.st_ino == socket_inode_) {
        ::unlink(socket_path_.c_str());
    }
}

}  // namespace mvmm::api
