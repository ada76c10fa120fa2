// Bad user input (command line, files named on it): main() prints the one-line message and
// exits 2.
#pragma once

#include <stdexcept>
#include "base/user_error.h"

namespace mvmm {

class UsageError : public UserError {
  public:
    using UserError::UserError;
};

}  // namespace mvmm
