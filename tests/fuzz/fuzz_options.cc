// fuzz_options: the --memory and --disk option parsers.  Every bad option must be a
// UsageError (one line for the user, exit 2): any other exception is a finding.
//
// Input: the --memory text, a newline, the --disk text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vmm/cli/config.h"
#include "vmm/cli/options.h"
#include "vmm/cli/usage_error.h"

namespace {

void parse(void (*parser)(std::string_view), std::string_view text) {
    try {
        parser(text);
    } catch (const mvmm::UsageError&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    const auto newline = input.find('\n');
    parse([](std::string_view text) { (void)mvmm::parse_memory_option(text); },
          input.substr(0, newline));
    if (newline != std::string_view::npos)
        parse(
            [](std::string_view text) {
                mvmm::DiskOptions disks;
                mvmm::add_disk_option(text, disks);
            },
            input.substr(newline + 1));
    return 0;
}
