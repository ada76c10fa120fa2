// What a virtio-scsi controller is made of; vmm/ parses --scsi-controller and the --disk
// options that name it into this, checked (vmm/options.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "devices/block/image_options.h"
#include "devices/virtio/queue_size.h"
#include "mem/slot_pool.h"

namespace mvmm::devices::virtio::scsi {

// LUN numbers 0 to 16383: single-level flat space addressing, the range Linux's virtio_scsi
// driver reaches.
inline constexpr uint16_t kMaxLun = 16383;
// Targets 0 to 255 (QEMU's scsi-id), each with its own LUNs.
inline constexpr uint16_t kMaxTarget = 255;
inline constexpr uint16_t kMaxRequestQueues = 64;
// VPD 80h's serial and the T10 designator after "MVMM    ": as long as QEMU's scsi-disk allows.
inline constexpr size_t kMaxSerialBytes = 36;

struct LunConfig {
    std::string path;
    uint16_t lun = 0;  // at most kMaxLun, unique on its target
    bool read_only = false;
    std::string serial;  // printable ASCII, 1 to kMaxSerialBytes: the LUN's names come from it
    uint8_t target = 0;
    uint32_t logical_block_size = 512;    // 512 or 4096; the image size is a multiple of it
    uint32_t physical_block_size = 0;     // 0: the logical size; else a power of two >= it
    block::ImageOptions image{};          // format=, cache=
    std::optional<block::AioMode> aio{};  // unset: io_uring where the kernel has it
};

struct ControllerConfig {
    std::string id;                           // for messages: "c0"
    uint16_t request_queues = 1;              // 1 to kMaxRequestQueues
    uint16_t queue_size = kDefaultQueueSize;  // every queue's maximum (valid_queue_size)
    std::vector<LunConfig> luns;
    SlotSource request_alloc = SlotSource::pool;  // where commands in flight live
    // Targets 0 to targets - 1 are there for LUNs added later (max_target targets - 1); 0: up
    // to the highest target of `luns`.  The driver reads max_target once, at start.
    uint16_t targets = 0;
};

}  // namespace mvmm::devices::virtio::scsi
