#include "devices/block/file_size.h"

#include <linux/fs.h>
#include <sys/ioctl.h>

#include <cerrno>
#include <cstring>

#include "devices/block/disk_image.h"

namespace mvmm::devices::block {

uint64_t image_file_size(int fd, const struct stat& st, const std::string& label) {
    if (S_ISREG(st.st_mode)) return static_cast<uint64_t>(st.st_size);
    uint64_t size = 0;
    if (::ioctl(fd, BLKGETSIZE64, &size) != 0)
        throw ImageError(label + ": cannot get the block device size: " + std::strerror(errno));
    return size;
}

}  // namespace mvmm::devices::block
