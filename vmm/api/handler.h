// What the management socket asks of the machine it manages.  The server calls these from the
// threads that run its io_context, possibly from several connections at once.
#pragma once

#include <string>

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

    // resize-disk: every disk opened from `path` (a --disk path=) reads its image's size again,
    // after the host grew or shrank the file, and tells the guest when it changed.  The reply
    // is {"path": ..., "size_bytes": N}.  Throws std::invalid_argument when no disk has that
    // path, std::runtime_error when the image no longer holds whole blocks.
    virtual nlohmann::json resize_disk(const std::string& path) = 0;
    // Disk hot-plug (vmm/disk_hotplug.h): add-disk takes --disk's keys, remove-disk {id}.
    // An exception becomes a GenericError reply; a failed request changes nothing.
    virtual nlohmann::json add_disk(const nlohmann::json& arguments) = 0;
    virtual nlohmann::json remove_disk(const nlohmann::json& arguments) = 0;
    virtual nlohmann::json query_disks() = 0;

    // Ends the VMM.  Called once the reply to quit has been written to the client's socket.
    virtual void quit() = 0;
};

}  // namespace mvmm::api
