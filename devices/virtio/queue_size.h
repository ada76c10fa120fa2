// A device's maximum queue size: what it reports as QUEUE_NUM_MAX for each of its queues, set
// by `queue-size=` on virtio-blk and virtio-scsi as QEMU's property is.  It also bounds each
// queue's request pool (queue_worker.h): one slot per ring entry, each with room for a ring's
// worth of buffers, so a pool's mapping grows with the square of the size.
#pragma once

#include <bit>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mvmm::devices::virtio {

inline constexpr uint16_t kDefaultQueueSize = 256;
// More than 2, as in QEMU: a request also needs its header and its status (seg_max is the
// queue size - 2).
inline constexpr uint16_t kMinQueueSize = 4;
// QEMU's limit for these devices (VIRTQUEUE_MAX_SIZE), though split rings allow 32768: QEMU
// hands a request's buffers to one preadv, which takes at most IOV_MAX (1024) of them.
inline constexpr uint16_t kMaxQueueSize = 1024;

// A power of two from kMinQueueSize to kMaxQueueSize.
constexpr bool valid_queue_size(uint64_t size) {
    return size >= kMinQueueSize && size <= kMaxQueueSize && std::has_single_bit(size);
}

// `size`, or std::invalid_argument naming `device` ("virtio-blk").
inline uint16_t checked_queue_size(uint16_t size, std::string_view device) {
    if (!valid_queue_size(size))
        throw std::invalid_argument(std::string(device) + ": queue-size " + std::to_string(size) +
                                    " is not a power of two from " + std::to_string(kMinQueueSize) +
                                    " to " + std::to_string(kMaxQueueSize));
    return size;
}

}  // namespace mvmm::devices::virtio
