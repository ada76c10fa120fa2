// The Linux x86 boot protocol (Documentation/arch/x86/boot.rst): parsing a bzImage and
// laying out the zero page, command line, initrd and e820 map in guest memory.
#pragma once

#include <asm/bootparam.h>

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/user_error.h"
#include "mem/guest_memory.h"

namespace mvmm::boot {

// A kernel or initrd that cannot be booted; the message says why, for the user.
class BootError : public UserError {
  public:
    using UserError::UserError;
};

struct BzImage {
    setup_header header;              // as found in the file
    std::span<const uint8_t> kernel;  // the protected-mode part, loaded at 1 MiB
};

// Checks the setup header: magic, protocol >= 2.12 with a 64-bit entry point, sizes in range.
// `file` must outlive the result.  Throws BootError.
BzImage parse_bzimage(std::span<const uint8_t> file);

inline constexpr uint32_t kE820Ram = 1;
inline constexpr uint32_t kE820Reserved = 2;

struct E820Entry {
    uint64_t addr;
    uint64_t size;
    uint32_t type;  // kE820Ram or kE820Reserved
};

struct BootInputs {
    const BzImage& image;
    std::span<const uint8_t> initrd;  // may be empty
    std::string cmdline;
    std::vector<E820Entry> e820;
    uint64_t rsdp_addr;
};

// Where the kernel was placed; the vCPU starts at `entry` with RSI = `zero_page`.
struct BootInfo {
    GuestAddr entry;
    GuestAddr zero_page;
    GuestAddr initrd;
};

// Where an initrd of `initrd_bytes` goes: page aligned, as high as the header allows below
// `low_ram_end`, above the kernel and the area it decompresses into.  Pure arithmetic on the
// (untrusted) header, checked for wrap-around, so config validation can run it before any
// memory exists.  Throws BootError when it does not fit.
GuestAddr place_initrd(const BzImage& image, uint64_t initrd_bytes, uint64_t low_ram_end);

// Throws BootError when the kernel does not accept a command line this long.
void check_cmdline(const BzImage& image, std::string_view cmdline);

// Writes kernel, initrd, command line and zero page to guest memory.  Throws BootError
// when they do not fit (e.g. initrd larger than the RAM below the kernel's limit).
BootInfo load_linux(const GuestMemory& memory, const BootInputs& inputs);

// The guest's e820 map for `ram`, the RAM ranges, plus the reserved firmware areas.
std::vector<E820Entry> build_e820(std::span<const std::pair<uint64_t, uint64_t>> ram);

}  // namespace mvmm::boot
