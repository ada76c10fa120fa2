#include "vmm/api/protocol.h"

#include <array>
#include <exception>

#include "vmm/api/memory_commands.h"

namespace mvmm::api {

namespace {

using nlohmann::json;

struct Command {
    std::string_view name;
    json (*run)(ApiHandler& handler);
    bool quit = false;
};

constexpr std::array kCommands{
    Command{"query-status", [](ApiHandler& handler) { return handler.query_status(); }},
    Command{"query-memory",
            [](ApiHandler& handler) {
                json memory = query_memory();
                memory["disk_caches"] = handler.query_disk_caches();
                return memory;
            }},
    Command{"trim-memory", [](ApiHandler&) { return trim_memory(); }},
    // The handler's quit() runs once the empty reply is on its way.
    Command{"quit", [](ApiHandler&) { return json::object(); }, true},
};

const Command* find_command(std::string_view name) {
    for (const Command& command : kCommands) {
        if (command.name == name) return &command;
    }
    return nullptr;
}

std::string known_commands() {
    std::string names;
    for (const Command& command : kCommands) {
        names += names.empty() ? "" : ", ";
        names += command.name;
    }
    return names;
}

std::string_view to_string(ErrorClass error_class) {
    switch (error_class) {
        case ErrorClass::CommandNotFound:
            return "CommandNotFound";
        case ErrorClass::InvalidJson:
            return "InvalidJson";
        case ErrorClass::GenericError:
            break;
    }
    return "GenericError";
}

struct TooDeep {};

bool refuse_deep_nesting(int depth, json::parse_event_t, json&) {
    if (depth >= kMaxJsonDepth) throw TooDeep{};
    return true;
}

// `request` is an object; its "id" is added by the caller.
Response execute(const json& request, ApiHandler& handler) {
    const auto name = request.find("execute");
    if (name == request.end() || !name->is_string()) {
        return {error_reply(ErrorClass::GenericError,
                            "the request has no \"execute\" member naming a command")};
    }
    const auto arguments = request.find("arguments");
    if (arguments != request.end() && !arguments->is_object()) {
        return {error_reply(ErrorClass::GenericError, "\"arguments\" must be a JSON object")};
    }
    const std::string& command_name = name->get_ref<const std::string&>();
    const Command* command = find_command(command_name);
    if (!command) {
        return {error_reply(ErrorClass::CommandNotFound,
                            "unknown command '" + command_name + "'; known: " + known_commands())};
    }
    if (arguments != request.end() && !arguments->empty()) {
        return {error_reply(ErrorClass::GenericError, "'" + command_name +
                                                          "' takes no arguments; unexpected '" +
                                                          arguments->begin().key() + "'")};
    }
    try {
        return {json{{"return", command->run(handler)}}, command->quit};
    } catch (const std::exception& e) {
        return {error_reply(ErrorClass::GenericError, command_name + ": " + e.what())};
    }
}

}  // namespace

json error_reply(ErrorClass error_class, const std::string& desc) {
    return {{"error", {{"class", to_string(error_class)}, {"desc", desc}}}};
}

Response execute_line(std::string_view line, ApiHandler& handler) {
    json request;
    try {
        request = json::parse(line, refuse_deep_nesting);
    } catch (const json::exception& e) {
        // parse_error, and out_of_range for a number no double holds (1e999).
        return {error_reply(ErrorClass::InvalidJson, std::string("not JSON: ") + e.what())};
    } catch (const TooDeep&) {
        return {
            error_reply(ErrorClass::InvalidJson,
                        "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels")};
    }
    if (!request.is_object()) {
        return {error_reply(ErrorClass::GenericError, "a request must be a JSON object")};
    }
    Response response = execute(request, handler);
    if (const auto id = request.find("id"); id != request.end()) response.reply["id"] = *id;
    return response;
}

std::string serialize(const json& reply) {
    return reply.dump(-1, ' ', false, json::error_handler_t::replace) + '\n';
}

}  // namespace mvmm::api
