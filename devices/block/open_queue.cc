// Which IoQueue a disk image's queue gets for its aio= mode.  Apart from io_queue.cc because
// the thread pool's queue is built on IoQueue: the choice depends on both, neither on it.
#include "devices/block/disk_image.h"
#include "devices/block/io_queue.h"
#include "devices/block/thread_pool.h"

namespace mvmm::devices::block {

std::unique_ptr<IoQueue> DiskImage::open_queue(AioMode mode, uint32_t depth) {
    switch (mode) {
        case AioMode::IoUring:
            return open_uring_queue(depth);
        case AioMode::Threads:
            break;
        case AioMode::Sync:
            return open_sync_queue(*this, depth);
    }
    return open_pool_queue(*this, depth);
}

// An image without a ring of its own (qcow2: synchronous metadata) runs io_uring's queue on
// the thread pool.
std::unique_ptr<IoQueue> DiskImage::open_uring_queue(uint32_t depth) {
    return open_pool_queue(*this, depth);
}

}  // namespace mvmm::devices::block
