// What the management socket asks of the machine it manages.  The server calls these from the
// threads that run its io_context, possibly from several connections at once.
#pragma once

#include <nlohmann/json.hpp>

namespace mvmm::api {

class ApiHandler {
  public:
    virtual ~ApiHandler() = default;

    // The reply to query-status, e.g. {"status": "running", "cpus": 2, "uptime_ms": 1234}.
    // An exception becomes a GenericError reply.
    virtual nlohmann::json query_status() = 0;
    // query-memory's "disk_caches": the disks' metadata caches (the boot report's form).
    virtual nlohmann::json query_disk_caches() = 0;

    // Ends the VMM.  Called once the reply to quit has been written to the client's socket.
    virtual void quit() = 0;
};

}  // namespace mvmm::api
