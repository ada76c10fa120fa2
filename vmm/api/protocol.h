// The management protocol, QMP-like: one JSON object per line each way.
//   request: {"execute": "query-status", "arguments": {}, "id": 7}  ("arguments", "id" optional)
//   reply:   {"return": {...}, "id": 7}
//            {"error": {"class": "CommandNotFound", "desc": "..."}, "id": 7}
// Executing a line never throws: every mistake in it becomes an error reply.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "vmm/api/handler.h"

namespace mvmm::api {

// A longer request line (newline included) gets an error reply, then the connection closes.
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;
// Containers nested deeper than this (the request object is the first level) are refused
// while parsing, before they are built: no request needs nesting.
inline constexpr int kMaxJsonDepth = 32;

enum class ErrorClass { GenericError, CommandNotFound, InvalidJson };

nlohmann::json error_reply(ErrorClass error_class, const std::string& desc);

struct Response {
    nlohmann::json reply;
    bool quit = false;  // call ApiHandler::quit() once the reply has been written
};

// One request line, without its newline.
Response execute_line(std::string_view line, ApiHandler& handler);

// The reply as sent: compact JSON and a newline.  Invalid UTF-8 (which can only come from a
// parser message quoting the client) is replaced rather than thrown on.
std::string serialize(const nlohmann::json& reply);

}  // namespace mvmm::api
