// mvmm's command line, from argv to a Config.  Every mistake is a UsageError of one line naming
// the option; nothing is opened or checked against the host here (validate.h does that).
#pragma once

#include <string>

#include "vmm/cli/config.h"

namespace mvmm {

// Parses argv; prints help/version and exits 0 for --help/--version, throws UsageError.
Config parse_command_line(int argc, char** argv);

// "stdio" or "file:PATH".
SerialConfig parse_serial(const std::string& text);

}  // namespace mvmm
