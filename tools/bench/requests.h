// The driver side of the request-path benchmark's devices (tools/bench/virtio_rig.h): what each
// request slot sends, laid out once in guest memory, what changes before each submission, and
// how the device's answer is checked.  Reads (rand4k, seq64k), or `mixed`: every kind of
// request the device serves, one kind per slot in turn (blk_requests.cc, scsi_requests.cc).
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/block/image_options.h"
#include "devices/virtio/queue_counters.h"
#include "devices/virtio/test_queue_driver.h"
#include "devices/virtio/virtio_device.h"
#include "mem/guest_addr.h"
#include "mem/slot_pool.h"

namespace mvmm::bench {

enum class DeviceKind { blk, scsi };
enum class Workload { rand4k, seq64k, mixed };
const char* to_string(DeviceKind device);
const char* to_string(Workload workload);

// What the image holds at byte `offset` (a multiple of 8): every read can be checked, and every
// write writes it again.
uint64_t pattern_word(uint64_t offset);

// The image's last MiB is where discards, write-zeroes, UNMAP and WRITE SAME go; reads and
// writes stay before it.
inline constexpr uint64_t kScratchBytes = 1 << 20;

// One request slot of a queue: its chain is an indirect table written once.
struct RequestSlot {
    uint16_t queue = 0;                // the device queue it is sent on
    size_t kind = 0;                   // which of the queue's kinds
    uint64_t transfer_bytes = 0;       // reads and writes of the image: how many bytes
    uint64_t offset = 0;               // ... and where, this submission (the rig picks it)
    GuestAddr header, data, response;  // as the device lays them out (data may be unused)
};

class DriverRequests {
  public:
    virtual ~DriverRequests() = default;

    struct Device {
        std::unique_ptr<devices::virtio::Device> device;
        const devices::virtio::QueueCounters* counters;  // the device's
    };
    // How blk reaches its image (a SCSI LUN has neither): aio= (unset: the device's default)
    // and cache=.
    struct BlkIo {
        std::optional<devices::block::AioMode> aio;
        devices::block::CacheMode cache = devices::block::CacheMode::Writeback;
    };
    // The device on `image`, writable unless the workload only reads.
    virtual Device device(const std::string& image, SlotSource request_alloc,
                          uint16_t request_queues, const BlkIo& blk_io,
                          boost::asio::io_context& io) const = 0;
    // The device's queues the rig's driver sets up (Linux sets up every one) and those it
    // sends requests on.
    virtual uint16_t device_queues(uint16_t request_queues) const = 0;
    virtual std::vector<uint16_t> loaded_queues(uint16_t request_queues) const = 0;
    // Whether the I/O threads serve `queue`, so that the allocation hook and the device's
    // statistics see its requests.
    virtual bool on_io_threads(uint16_t) const { return true; }
    // How many kinds of request `queue` takes turns at (slot s sends kind s % kinds).
    virtual size_t kinds(uint16_t queue) const = 0;

    // Writes `slot`'s buffers (its queue and kind set) into guest memory, sets its transfer
    // size and addresses, and returns its descriptors in chain order.
    virtual std::vector<devices::virtio::testing::Desc> lay_out(
        devices::virtio::testing::TestGuest& guest, RequestSlot& slot) const = 0;
    // Before each submission, with `slot.offset` chosen: what the position changes, and a
    // status the device must overwrite.
    virtual void prepare(const devices::virtio::testing::TestGuest& guest,
                         const RequestSlot& slot) const = 0;
    // After the device returned the slot: throws std::runtime_error, naming the request, when
    // its status, answer or bytes are wrong.  Allocates nothing when all is well.
    virtual void check(const devices::virtio::testing::TestGuest& guest, const RequestSlot& slot,
                       bool every_word) const = 0;
};

// For an image of `image_bytes` (the scratch area at its end).
std::unique_ptr<const DriverRequests> blk_requests(Workload workload, uint64_t image_bytes);
std::unique_ptr<const DriverRequests> scsi_requests(Workload workload, uint64_t image_bytes);

// Shared by both: the pattern into a write's buffer, and a read's buffer checked against it.
void fill_pattern(const devices::virtio::testing::TestGuest& guest, GuestAddr at, uint64_t bytes,
                  uint64_t image_offset);
void check_pattern(const devices::virtio::testing::TestGuest& guest, GuestAddr at, uint64_t bytes,
                   uint64_t image_offset, bool every_word, const char* what);

}  // namespace mvmm::bench
