#include "vmm/api/protocol.h"

#include <gtest/gtest.h>

#include <string>

#include "rcu/trim.h"
#include "vmm/api/test_support.h"

namespace mvmm::api {
namespace {

using nlohmann::json;

class Protocol : public ::testing::Test {
  protected:
    json run(std::string_view line) { return execute_line(line, handler).reply; }

    // The error class of a reply, or "" when it is not an error.
    std::string error_class(std::string_view line) {
        const json reply = run(line);
        return reply.contains("error") ? reply["error"]["class"].get<std::string>() : "";
    }

    test_support::FakeHandler handler;
};

TEST_F(Protocol, QueryStatusComesFromTheHandler) {
    EXPECT_EQ(run(R"({"execute": "query-status"})"),
              (json{{"return", {{"status", "running"}, {"cpus", 2}, {"uptime_ms", 1234}}}}));
}

TEST_F(Protocol, IdIsEchoedOnReturnsAndErrors) {
    EXPECT_EQ(run(R"({"execute": "query-status", "id": 7})")["id"], 7);
    EXPECT_EQ(run(R"({"execute": "no-such", "id": {"tag": "x"}})")["id"], (json{{"tag", "x"}}));
    EXPECT_FALSE(run(R"({"execute": "query-status"})").contains("id"));
}

TEST_F(Protocol, MalformedJsonIsInvalidJson) {
    EXPECT_EQ(error_class("nope"), "InvalidJson");
    EXPECT_EQ(error_class(R"({"execute": "query-status")"), "InvalidJson");
    EXPECT_EQ(error_class(R"({"execute": "query-status"} {})"), "InvalidJson");
    EXPECT_EQ(error_class("{\"execute\": \"\xff\"}"), "InvalidJson");
}

TEST_F(Protocol, NumbersNoDoubleHoldsAreInvalidJson) {
    EXPECT_EQ(error_class(R"({"execute": "query-status", "id": 1e999})"), "InvalidJson");
    EXPECT_EQ(error_class(R"({"execute": "query-status", "id": -1e999})"), "InvalidJson");
    EXPECT_EQ(run(R"({"execute": "query-status", "id": 1e300})")["id"], 1e300);
}

TEST_F(Protocol, DeepNestingIsRefused) {
    const auto nested = [](int depth) {
        return R"({"execute": "query-status", "id": )" + std::string(depth, '[') +
               std::string(depth, ']') + "}";
    };
    EXPECT_TRUE(run(nested(kMaxJsonDepth - 1)).contains("return"));
    EXPECT_EQ(error_class(nested(kMaxJsonDepth)), "InvalidJson");
    EXPECT_EQ(error_class(nested(100000)), "InvalidJson");
}

TEST_F(Protocol, BadRequestsAreGenericErrors) {
    for (const char* line :
         {"[1, 2]", "\"query-status\"", "3", "null", "{}", R"({"execute": 3})",
          R"({"command": "query-status"})", R"({"execute": "query-status", "arguments": [1]})",
          R"({"execute": "query-status", "arguments": {"verbose": true}})"}) {
        EXPECT_EQ(error_class(line), "GenericError") << line;
    }
}

TEST_F(Protocol, UnknownCommandListsTheKnownOnes) {
    const json reply = run(R"({"execute": "stop"})");
    EXPECT_EQ(reply["error"]["class"], "CommandNotFound");
    const std::string desc = reply["error"]["desc"];
    EXPECT_NE(desc.find("'stop'"), std::string::npos) << desc;
    EXPECT_NE(desc.find("query-memory"), std::string::npos) << desc;
}

TEST_F(Protocol, HandlerFailureIsAGenericError) {
    handler.status_fails = true;
    const json reply = run(R"({"execute": "query-status"})");
    EXPECT_EQ(reply["error"]["class"], "GenericError");
    EXPECT_NE(reply["error"]["desc"].get<std::string>().find("on fire"), std::string::npos);
}

TEST_F(Protocol, ResizeDiskPassesThePathToTheHandler) {
    EXPECT_EQ(run(R"({"execute": "resize-disk", "arguments": {"path": "disk.img"}})"),
              (json{{"return", {{"path", "disk.img"}, {"size_bytes", 4096}}}}));
    const json unknown = run(R"({"execute": "resize-disk", "arguments": {"path": "other.img"}})");
    EXPECT_EQ(unknown["error"]["class"], "GenericError");
    EXPECT_NE(unknown["error"]["desc"].get<std::string>().find("no --disk has path=other.img"),
              std::string::npos)
        << unknown;
}

TEST_F(Protocol, ResizeDiskNeedsAPathAndNothingElse) {
    for (const char* line :
         {R"({"execute": "resize-disk"})", R"({"execute": "resize-disk", "arguments": {}})",
          R"({"execute": "resize-disk", "arguments": {"path": 3}})",
          R"({"execute": "resize-disk", "arguments": {"path": "disk.img", "id": "x"}})",
          R"({"execute": "query-status", "arguments": {"path": "disk.img"}})"}) {
        EXPECT_EQ(error_class(line), "GenericError") << line;
    }
    const std::string desc = run(R"({"execute": "resize-disk"})")["error"]["desc"];
    EXPECT_NE(desc.find(R"(needs "arguments": {"path": ...})"), std::string::npos) << desc;
}

TEST_F(Protocol, QuitRepliesFirstAndLeavesTheCallToTheServer) {
    const Response response = execute_line(R"({"execute": "quit", "arguments": {}})", handler);
    EXPECT_EQ(response.reply, (json{{"return", json::object()}}));
    EXPECT_TRUE(response.quit);
    EXPECT_EQ(handler.quits, 0);
    EXPECT_FALSE(execute_line(R"({"execute": "query-status"})", handler).quit);
}

TEST_F(Protocol, DiskCommandsHandTheirArgumentsToTheHandler) {
    EXPECT_EQ(run(R"({"execute": "add-disk", "arguments": {"path": "a.img", "readonly": true}})"),
              (json{{"return", {{"added", {{"path", "a.img"}, {"readonly", true}}}}}}));
    EXPECT_EQ(run(R"({"execute": "remove-disk", "arguments": {"id": "disk3"}})"),
              (json{{"return", {{"removing", {{"id", "disk3"}}}}}}));
    EXPECT_EQ(run(R"({"execute": "add-disk"})"), (json{{"return", {{"added", json::object()}}}}));
    EXPECT_EQ(error_class(R"({"execute": "query-disks", "arguments": {"all": true}})"),
              "GenericError");
}

class MemoryPolicy : public Protocol {
  protected:
    void TearDown() override { rcu::set_trim_policy(rcu::TrimConfig{}); }
};

TEST_F(MemoryPolicy, SetTakesEffectAndQueryShowsTheChange) {
    const json before = run(R"({"execute": "query-memory-policy"})")["return"];
    const json reply = run(R"({"execute": "set-memory-policy",
                "arguments": {"trim-policy": "adaptive", "trim-factor": 25}})");
    ASSERT_TRUE(reply.contains("return")) << reply;
    EXPECT_EQ(reply["return"]["policy"], "adaptive");
    EXPECT_EQ(reply["return"]["factor"], 25.0);
    EXPECT_EQ(reply["return"]["from_batch"], before["batches"].get<uint64_t>() + 1);
    const json after = run(R"({"execute": "query-memory-policy"})")["return"];
    EXPECT_EQ(after["policy"], "adaptive");
    EXPECT_EQ(after["factor"], 25.0);
    EXPECT_EQ(after["changes"], before["changes"].get<uint64_t>() + 1);
    EXPECT_EQ(after["recent_changes"].back()["policy"], "adaptive");
    EXPECT_TRUE(after["recent_changes"].back()["at_ns"].is_number_integer());
    // One key alone keeps the other.
    run(R"({"execute": "set-memory-policy", "arguments": {"trim-factor": 9}})");
    EXPECT_EQ(rcu::trim_stats().config.policy, rcu::TrimPolicyKind::adaptive);
    EXPECT_EQ(rcu::trim_stats().config.factor, 9);
}

TEST_F(MemoryPolicy, BadRequestsChangeNothing) {
    run(R"({"execute": "set-memory-policy", "arguments": {"trim-policy": "batch"}})");
    const uint64_t changes = rcu::trim_stats().policy_changes;
    for (const char* arguments :
         {R"({})", R"({"trim-policy": "sometimes"})", R"({"trim-policy": 3})",
          R"({"trim-factor": "big"})", R"({"trim-factor": -1})",
          R"({"trim-policy": "off", "colour": "red"})"}) {
        const json reply =
            run(std::string(R"({"execute": "set-memory-policy", "arguments": )") + arguments + "}");
        EXPECT_EQ(reply["error"]["class"], "GenericError") << arguments;
    }
    EXPECT_EQ(rcu::trim_stats().config.policy, rcu::TrimPolicyKind::batch);
    EXPECT_EQ(rcu::trim_stats().policy_changes, changes);
}

void expect_counters(const json& counters) {
    for (const char* key : {"trims", "time_ns", "heap_bytes_released", "rss_bytes_released"}) {
        EXPECT_TRUE(counters[key].is_number_integer()) << key;
    }
}

TEST_F(Protocol, QueryMemoryShape) {
    const json memory = run(R"({"execute": "query-memory"})")["return"];
    for (const char* key :
         {"heap_rss_bytes", "heap_size_bytes", "anon_rss_bytes", "vm_rss_bytes", "vm_hwm_bytes"}) {
        EXPECT_TRUE(memory[key].is_number_unsigned()) << key;
    }
    EXPECT_GT(memory["vm_rss_bytes"], 0);
    EXPECT_EQ(memory["disk_caches"]["resident_bytes"], 4096) << "the machine's";
    if (rcu::trim_supported()) {
        for (const char* key : {"arena", "hblkhd", "uordblks", "fordblks", "keepcost"}) {
            EXPECT_TRUE(memory["malloc"][key].is_number_unsigned()) << key;
        }
    } else {
        EXPECT_TRUE(memory["malloc"].is_null());
    }
    const json& trim = memory["trim"];
    EXPECT_EQ(trim["policy"], std::string(rcu::to_string(rcu::trim_stats().config.policy)));
    EXPECT_EQ(trim["supported"], rcu::trim_supported());
    EXPECT_TRUE(trim["batches"].is_number_unsigned());
    EXPECT_TRUE(trim["callbacks"].is_number_unsigned());
    expect_counters(trim["by_policy"]);
    expect_counters(trim["on_demand"]);
}

TEST_F(Protocol, TrimMemoryReportsWhatItReleased) {
    const uint64_t trims_before = rcu::trim_stats().on_demand.trims;
    const json reply = run(R"({"execute": "trim-memory"})");
    if (!rcu::trim_supported()) {
        EXPECT_EQ(reply["error"]["class"], "GenericError");
        EXPECT_NE(reply["error"]["desc"].get<std::string>().find("not supported"),
                  std::string::npos);
        return;
    }
    const json& trimmed = reply["return"];
    for (const char* key : {"heap_bytes_released", "rss_bytes_released", "duration_ns",
                            "heap_rss_before", "heap_rss_after"}) {
        EXPECT_TRUE(trimmed[key].is_number_integer()) << key;
    }
    EXPECT_GT(trimmed["duration_ns"], 0);
    EXPECT_EQ(rcu::trim_stats().on_demand.trims, trims_before + 1);
}

TEST(Serialize, OneLineEvenWithInvalidUtf8) {
    const std::string line = serialize(error_reply(ErrorClass::GenericError, "bad \xff byte\n"));
    EXPECT_EQ(line.find('\n'), line.size() - 1);
    EXPECT_EQ(json::parse(line)["error"]["class"], "GenericError");
}

}  // namespace
}  // namespace mvmm::api
