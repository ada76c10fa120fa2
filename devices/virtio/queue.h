// Split virtqueues (virtio 1.2, section 2.7).  The layout the driver chose is checked once,
// when the queue is created at DRIVER_OK; after that every descriptor chain is walked with a
// budget (so loops end) and every buffer is checked against guest RAM before a device sees
// it.  A ring the driver corrupted yields a RingError: the device stops using the queue and
// asks for a reset (DEVICE_NEEDS_RESET).  Not thread-safe: one thread at a time per queue.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"
#include "devices/virtio/virtio_device.h"
#include "mem/guest_buffers.h"
#include "mem/guest_memory.h"

namespace mvmm::devices::virtio {

enum class RingError {
    BadQueueSize,           // zero, not a power of two, or above the device's maximum
    MisalignedRing,         // descriptor table, driver or device area not aligned
    RingOutsideRam,         // a ring does not lie entirely in guest RAM
    AvailIndexJump,         // the driver published more new buffers than the queue holds
    HeadOutOfRange,         // an available ring entry is not a descriptor index
    NextOutOfRange,         // a `next` field points past the table
    ChainTooLong,           // more descriptors than the table holds: a loop
    IndirectNotNegotiated,  // VIRTQ_DESC_F_INDIRECT without VIRTIO_F_INDIRECT_DESC
    IndirectWithNext,       // INDIRECT and NEXT in one descriptor
    IndirectNotFirst,       // an indirect table after direct buffers in the same chain
    NestedIndirect,         // an indirect descriptor inside an indirect table
    BadIndirectLength,      // zero, not a multiple of 16, or more entries than the queue size
    IndirectOutsideRam,     // the indirect table is not in guest RAM
    BufferOutsideRam,       // addr + len is not in guest RAM (wrap-around included)
    EmptyBuffer,            // a zero-length buffer
    ReadableAfterWritable,  // device-readable buffers must come first
    ChainTooLarge,          // the buffers add up to 4 GiB or more
};
std::string_view to_string(RingError error);

// One request from the driver, with every buffer checked.  Its buffer lists are views of the
// parts pop() was given.
struct DescriptorChain {
    uint16_t head = 0;      // what the device returns in the used ring
    GuestBuffers readable;  // device-readable, in chain order
    GuestBuffers writable;  // device-writable, all after the readable ones
};

class SplitQueue {
  public:
    // Checks `config` (size a power of two <= max_size; alignment 16/2/4; rings in RAM).
    // Only `features` bits INDIRECT_DESC and EVENT_IDX matter here.  `memory` must outlive
    // the queue.
    static Result<SplitQueue, RingError> create(const GuestMemory& memory,
                                                const QueueConfig& config, uint16_t max_size,
                                                uint64_t features);

    uint16_t size() const noexcept { return size_; }

    // The next available chain, nullopt when the driver has published nothing new.  Its
    // buffers are recorded in `parts`, one per descriptor, which must hold size() of them (a
    // chain has at most that many) and outlive the chain; only the ones used are written.
    Result<std::optional<DescriptorChain>, RingError> pop(std::span<GuestBuffers::Part> parts);
    // Whether pop() has something to look at: a chain, or an index it reports as corrupt.
    bool has_available() const;
    // Returns a chain to the driver; `written` is how many bytes the device wrote into its
    // writable buffers.
    void push_used(uint16_t head, uint32_t written);

    // Asks the driver not to kick while the device drains the queue.
    void disable_notifications();
    // Asks for kicks again.  Returns true when buffers arrived meanwhile: the caller must
    // drain again or they would wait for a kick that never comes.
    [[nodiscard]] bool enable_notifications();
    // Whether the driver wants an interrupt for the chains used since the last call
    // (VRING_AVAIL_F_NO_INTERRUPT, or used_event with EVENT_IDX).
    [[nodiscard]] bool should_notify();

  private:
    SplitQueue(const GuestMemory& memory, uint16_t size, uint64_t features, GuestSlice desc,
               GuestSlice avail, GuestSlice used);
    Result<Ok, RingError> walk(uint16_t head, std::span<GuestBuffers::Part> parts,
                               DescriptorChain& chain) const;

    const GuestMemory* memory_;
    uint16_t size_;
    bool indirect_allowed_;
    bool event_idx_;
    GuestSlice desc_;             // the descriptor table
    GuestSlice avail_;            // flags, idx, ring[size], used_event
    GuestSlice used_;             // flags, idx, ring[size] of {id, len}, avail_event
    uint16_t next_avail_ = 0;     // the next avail ring entry to pop
    uint16_t next_used_ = 0;      // the used idx the device publishes next
    uint16_t notified_used_ = 0;  // next_used_ when should_notify() last ran
};

}  // namespace mvmm::devices::virtio
