#include "vmm/api/protocol.h"

#include <array>
#include <exception>

#include "vmm/api/memory_commands.h"

namespace mvmm::api {

namespace {

using nlohmann::json;

struct Command {
    std::string_view name;
    json (*run)(ApiHandler& handler, const json& arguments);
    bool quit = false;
    std::string_view argument = {};     // the one string argument it needs, if any
    bool checks_its_arguments = false;  // the handler parses them (add-disk's are --disk's keys)
};

constexpr std::array kCommands{
    Command{"query-status",
            [](ApiHandler& handler, const json&) { return handler.query_status(); }},
    Command{"query-memory",
            [](ApiHandler& handler, const json&) {
                json memory = query_memory();
                memory["disk_caches"] = handler.query_disk_caches();
                return memory;
            }},
    Command{"trim-memory", [](ApiHandler&, const json&) { return trim_memory(); }},
    Command{"resize-disk",
            [](ApiHandler& handler, const json& arguments) {
                return handler.resize_disk(arguments["path"].get<std::string>());
            },
            false, "path"},
    Command{"query-memory-policy", [](ApiHandler&, const json&) { return query_memory_policy(); }},
    Command{"set-memory-policy",
            [](ApiHandler&, const json& arguments) { return set_memory_policy(arguments); },
            false,
            {},
            true},
    Command{"query-disks", [](ApiHandler& handler, const json&) { return handler.query_disks(); }},
    Command{"add-disk",
            [](ApiHandler& handler, const json& arguments) { return handler.add_disk(arguments); },
            false,
            {},
            true},
    Command{
        "remove-disk",
        [](ApiHandler& handler, const json& arguments) { return handler.remove_disk(arguments); },
        false,
        {},
        true},
    // The handler's quit() runs once the empty reply is on its way.
    Command{"quit", [](ApiHandler&, const json&) { return json::object(); }, true},
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

// What is wrong with `arguments` (an object) for `command`, or "" when nothing is.
std::string check_arguments(const Command& command, const json& arguments) {
    if (command.checks_its_arguments) return "";
    const std::string name(command.name);
    for (const auto& [key, value] : arguments.items()) {
        if (key != command.argument)
            return "'" + name + "' takes " +
                   (command.argument.empty() ? "no arguments"
                                             : "only \"" + std::string(command.argument) + "\"") +
                   "; unexpected '" + key + "'";
        if (!value.is_string()) return "'" + name + "': \"" + key + "\" must be a string";
    }
    if (!command.argument.empty() && !arguments.contains(std::string(command.argument)))
        return "'" + name + "' needs \"arguments\": {\"" + std::string(command.argument) +
               "\": ...}";
    return "";
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
    const json given = arguments != request.end() ? *arguments : json::object();
    if (const std::string wrong = check_arguments(*command, given); !wrong.empty())
        return {error_reply(ErrorClass::GenericError, wrong)};
    try {
        return {json{{"return", command->run(handler, given)}}, command->quit};
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
