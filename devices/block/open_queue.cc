// Which IoQueue a disk image's queue gets for its aio= mode.  Apart from io_queue.cc because
// the thread pool's queue is built on IoQueue: the choice depends on both, neither on it.
#include "devices/block/disk_image.h"
#include "devices/block/io_queue.h"
#include "devices/block/thread_pool.h"

namespace mvmm::devices::block {

AioMode checked_aio_mode(std::optional<AioMode> aio, const std::string& path) {
    if (!aio) return default_aio_mode();
    if (*aio == AioMode::IoUring && !io_uring_supported())
        throw ImageError("disk image " + path +
                         ": aio=io_uring: this kernel does not allow io_uring; use aio=threads");
    return *aio;
}

std::unique_ptr<IoQueue> DiskImage::open_queue(AioMode mode, uint32_t depth,
                                               const EventFd* completions) {
    switch (mode) {
        case AioMode::IoUring:
            return open_uring_queue(depth, completions);
        case AioMode::Threads:
            break;
        case AioMode::Sync:
            return open_sync_queue(*this, depth);
    }
    return open_pool_queue(*this, depth, completions);
}

// An image without a ring of its own (qcow2: synchronous metadata) runs io_uring's queue on
// the thread pool.
std::unique_ptr<IoQueue> DiskImage::open_uring_queue(uint32_t depth, const EventFd* completions) {
    return open_pool_queue(*this, depth, completions);
}

}  // namespace mvmm::devices::block
