// What a virtio-blk disk is made of; vmm/ parses `--disk` into it (vmm/options.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "devices/block/image_options.h"
#include "devices/virtio/queue_size.h"
#include "mem/slot_pool.h"

namespace mvmm::devices::virtio::blk {

inline constexpr uint16_t kMaxQueues = 64;
inline constexpr size_t kSerialBytes = 20;  // VIRTIO_BLK_ID_BYTES

enum class DiskBus {
    RootPort,  // behind a PCIe root port of its own (the default)
    Root,      // directly on the root bus
};

struct DiskConfig {
    std::string path;
    bool read_only = false;
    std::optional<std::string> serial;  // printable ASCII, at most kSerialBytes; unset: derived
                                        // from the path (see disk_serial)
    uint16_t queues = 1;                // 1 to kMaxQueues
    uint16_t queue_size = kDefaultQueueSize;  // each queue's maximum (valid_queue_size)
    DiskBus bus = DiskBus::RootPort;
    uint32_t logical_block_size = 512;            // blk_size: 512 or 4096 (../block_size.h)
    uint32_t physical_block_size = 0;             // 0: the logical size; else a power of two >= it
    SlotSource request_alloc = SlotSource::pool;  // where requests in flight live
    block::ImageOptions image;                    // format=, cache=
    std::optional<block::AioMode> aio;            // unset: io_uring where the kernel has it
};

// The device ID string the guest sees (/dev/disk/by-id/virtio-<serial>): the configured
// serial, else the last 20 bytes of the image's file name.
std::string disk_serial(const DiskConfig& config);

}  // namespace mvmm::devices::virtio::blk
