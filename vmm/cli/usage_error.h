// Bad user input (command line, files named on it): main() prints the one-line message and
// exits 2.
#pragma once

#include <stdexcept>

namespace mvmm {

class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

}  // namespace mvmm
