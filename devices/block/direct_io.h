// cache=none: files opened with O_DIRECT, for raw and qcow2 images alike.  O_DIRECT asks
// buffer addresses, lengths and file offsets to be multiples of the file's alignment.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "devices/block/image_options.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::block {

// The open(2) flags cache= adds.
int cache_open_flags(CacheMode cache) noexcept;

// Throws ImageError "`label`: ..." when open(2) with cache_open_flags(cache) failed with
// `error` because the filesystem refuses O_DIRECT; returns otherwise.
void check_direct_open(CacheMode cache, int error, const std::string& label);

// The largest alignment O_DIRECT asks of buffer addresses, lengths and file offsets in `fd`.
// Guest offsets are whole 512-byte sectors, so a file that needs more (a 4 KiB-sector disk)
// cannot be used with cache=none: throws ImageError "`label`: ..." saying so.
size_t direct_io_alignment(int fd, const struct stat& st, const std::string& label);

// Whether every piece's host address and length is a multiple of `alignment`.
bool aligned(const GuestBuffers& buffers, size_t alignment) noexcept;

}  // namespace mvmm::devices::block
