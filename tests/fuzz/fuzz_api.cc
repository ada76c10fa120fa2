// fuzz_api: one line from a management-socket client, executed by the real protocol code
// against a fake machine; the reply must serialize.  protocol.h promises that executing a line
// never throws, so any exception is a finding.
//
// Input: the line, without its newline (tests/fuzz/api.dict holds the protocol's words).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vmm/api/protocol.h"
#include "vmm/api/test_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static mvmm::api::test_support::FakeHandler handler;
    const std::string_view line(reinterpret_cast<const char*>(data), size);
    const auto response = mvmm::api::execute_line(line, handler);
    const auto text = mvmm::api::serialize(response.reply);
    if (text.empty() || text.back() != '\n') __builtin_trap();
    return 0;
}
