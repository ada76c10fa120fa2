#include "devices/block/direct_io.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "devices/block/disk_image.h"

namespace mvmm::devices::block {

int cache_open_flags(CacheMode cache) noexcept {
    return cache == CacheMode::None ? O_DIRECT : 0;
}

void check_direct_open(CacheMode cache, int error, const std::string& label) {
    if (cache == CacheMode::None && error == EINVAL)
        throw ImageError(label +
                         ": cache=none: its filesystem does not support O_DIRECT (tmpfs before "
                         "Linux 6.6 does not); use cache=writeback");
}

size_t direct_io_alignment(int fd, const struct stat& st, const std::string& label) {
    struct statx sx {};
    size_t memory = kImageBlockSize, offset = kImageBlockSize;  // what filesystems ask
    if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 &&
        (sx.stx_mask & STATX_DIOALIGN)) {
        memory = sx.stx_dio_mem_align;
        offset = sx.stx_dio_offset_align;
    } else if (int sector = 0; S_ISBLK(st.st_mode) && ::ioctl(fd, BLKSSZGET, &sector) == 0) {
        memory = offset = static_cast<size_t>(sector);
    }
    if (offset == 0)
        throw ImageError(label +
                         ": cache=none: its filesystem does not support O_DIRECT; use "
                         "cache=writeback");
    if (offset > kImageBlockSize)
        throw ImageError(label + ": cache=none: O_DIRECT needs " + std::to_string(offset) +
                         "-byte aligned offsets here, more than a 512-byte sector; use "
                         "cache=writeback");
    return std::max({memory, offset, size_t{1}});
}

bool aligned(const GuestBuffers& buffers, size_t alignment) noexcept {
    for (const GuestBuffers::Part piece : buffers) {
        const iovec iov = piece.as_iovec();
        if (reinterpret_cast<uintptr_t>(iov.iov_base) % alignment != 0 ||
            iov.iov_len % alignment != 0)
            return false;
    }
    return true;
}

}  // namespace mvmm::devices::block
