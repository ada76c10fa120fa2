// The guest's console markers, `MVMM-MARK <name> <guest uptime in s> [key=value ...]`
// (guest-images/README.md), picked out of the bytes the guest writes to its serial port.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mvmm {

struct GuestMark {
    std::string name;
    int64_t t_ns = 0;  // when its line ended, ns since mvmm started (set by the reader's caller)
    std::optional<double> guest_uptime_s;  // absent when the second word is not a number
    std::vector<std::pair<std::string, std::string>> fields;  // the key=value words
};

// The marker in `line`, which may carry anything before it (a BIOS's escape codes); nullopt
// when the line holds no `MVMM-MARK <name>`.
std::optional<GuestMark> parse_mark(std::string_view line);

// Assembles console bytes into lines and returns each marker when its line ends (t_ns unset:
// the caller reads the clock only then).  Bounded: a line keeps its first kMaxLine bytes.
class MarkReader {
  public:
    static constexpr size_t kMaxLine = 1024;

    std::optional<GuestMark> feed(uint8_t byte);

  private:
    std::string line_;
};

}  // namespace mvmm
