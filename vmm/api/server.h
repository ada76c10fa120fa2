// The management socket: a UNIX stream socket speaking the protocol in protocol.h to any number
// of clients at once.  Everything runs as handlers on the io_context, one strand per
// connection, so the io_context may run on any number of threads.  A connection reads its next
// request only once its last reply is written: a client that never reads its replies, or stalls
// mid-line, holds at most one line and one reply and blocks nobody else.
#pragma once

#include <sys/types.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "base/user_error.h"
#include "vmm/api/handler.h"

namespace boost::asio {
class io_context;
}

namespace mvmm::api {

// The socket cannot be created: the message names the path and the reason.
class ApiSocketError : public UserError {
  public:
    using UserError::UserError;
};

// What can be known about `socket_path` without touching it: its length, that a file already
// there is a socket (a stale one gets replaced, anything else is kept) and that its directory
// is writable.  Throws ApiSocketError; the server checks the same again when it starts.
void check_socket_path(const std::string& socket_path);

class ApiServer {
  public:
    // Listens on `socket_path` (mode 0600) and starts accepting once the io_context runs.  A
    // socket file left behind by a dead process is replaced; a live one, or any other kind of
    // file, is an ApiSocketError.  `io` and `handler` must outlive the server.
    ApiServer(boost::asio::io_context& io, const std::string& socket_path, ApiHandler& handler);
    // Closes every connection and removes the socket file (unless someone replaced it).
    // Destroy the server while no thread runs the io_context (e.g. after joining the I/O
    // threads): connections still queued there then only see their sockets closed.
    ~ApiServer();
    ApiServer(const ApiServer&) = delete;
    ApiServer& operator=(const ApiServer&) = delete;

    const std::string& socket_path() const { return socket_path_; }

  private:
    class Listener;

    std::string socket_path_;
    dev_t socket_device_ = 0;  // which file to unlink: ours, not a successor's
    ino_t socket_inode_ = 0;
    // Shared with its pending handlers, which may outlive the server in a stopped io_context.
    std::shared_ptr<Listener> listener_;
};

}  // namespace mvmm::api
