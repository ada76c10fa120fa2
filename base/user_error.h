// A mistake in what the user gave mvmm: the command line, the files it names, or what the host
// cannot give (hugepages, memory, a socket path).  main() prints its one line and exits 2; every
// other exception is mvmm's own failure (exit 1).  Each layer derives its own kind from it.
#pragma once

#include <stdexcept>

namespace mvmm {

class UserError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

}  // namespace mvmm
