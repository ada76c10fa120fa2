// The bytes a disk image's file holds, for raw and qcow2 images alike: an image may be a
// regular file or a block device (an LVM volume, a partition), whose st_size is 0.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace mvmm::devices::block {

// A regular file's size, or a block device's (BLKGETSIZE64).  Throws ImageError "`label`:
// cannot get the block device size: ..." when the device does not say.
uint64_t image_file_size(int fd, const struct stat& st, const std::string& label);

}  // namespace mvmm::devices::block
