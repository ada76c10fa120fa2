#include "devices/virtio/queue.h"

// Without the legacy layout helpers, whose C does not compile as C++.
#define VIRTIO_RING_NO_LEGACY
#include <linux/virtio_ring.h>

#include <atomic>
#include <bit>
#include <cstddef>
#include <limits>
#include <memory>
#include <stdexcept>

namespace mvmm::devices::virtio {
namespace {

static_assert(std::endian::native == std::endian::little,
              "virtio 1.x rings are little-endian; this host reads them natively");

// The ring layouts are <linux/virtio_ring.h>'s (virtio 1.2, 2.7): the driver area is
// {flags, idx, ring[size], used_event}, the device area {flags, idx, ring[size] of {id, len},
// avail_event}.
using Descriptor = vring_desc;
static_assert(sizeof(Descriptor) == 16);
static_assert(offsetof(vring_avail, idx) == offsetof(vring_used, idx));
constexpr uint64_t kIdxOffset = offsetof(vring_avail, idx);
constexpr uint64_t avail_entry_offset(uint64_t i) {
    return offsetof(vring_avail, ring) + sizeof(__virtio16) * i;
}
constexpr uint64_t used_entry_offset(uint64_t i) {
    return offsetof(vring_used, ring) + sizeof(vring_used_elem) * i;
}

// Ring fields the driver reads or writes concurrently are loaded and stored atomically;
// create() checked the alignment that needs, on both sides.
bool aligned(GuestAddr guest, const GuestSlice& host, uint64_t alignment) {
    return guest.value() % alignment == 0 && host.aligned(alignment);
}

// virtio 1.2, 2.7.10: has new_idx just passed event, counting from old_idx?
bool need_event(uint16_t event, uint16_t new_idx, uint16_t old_idx) {
    return uint16_t(new_idx - event - 1) < uint16_t(new_idx - old_idx);
}

}  // namespace

std::string_view to_string(RingError error) {
    switch (error) {
        case RingError::BadQueueSize:
            return "queue size is zero, not a power of two or too big";
        case RingError::MisalignedRing:
            return "a ring is not aligned";
        case RingError::RingOutsideRam:
            return "a ring is not in guest RAM";
        case RingError::AvailIndexJump:
            return "available index moved by more than the queue size";
        case RingError::HeadOutOfRange:
            return "available ring entry is not a descriptor index";
        case RingError::NextOutOfRange:
            return "descriptor next index out of range";
        case RingError::ChainTooLong:
            return "descriptor chain loops";
        case RingError::IndirectNotNegotiated:
            return "indirect descriptor not negotiated";
        case RingError::IndirectWithNext:
            return "indirect descriptor with NEXT flag";
        case RingError::IndirectNotFirst:
            return "indirect descriptor after direct buffers";
        case RingError::NestedIndirect:
            return "indirect descriptor inside an indirect table";
        case RingError::BadIndirectLength:
            return "bad indirect table length";
        case RingError::IndirectOutsideRam:
            return "indirect table is not in guest RAM";
        case RingError::BufferOutsideRam:
            return "buffer is not in guest RAM";
        case RingError::EmptyBuffer:
            return "zero-length buffer";
        case RingError::ReadableAfterWritable:
            return "device-readable buffer after a writable one";
        case RingError::ChainTooLarge:
            return "descriptor chain is 4 GiB or larger";
    }
    return "unknown ring error";
}

SplitQueue::SplitQueue(const GuestMemory& memory, uint16_t size, uint64_t features, GuestSlice desc,
                       GuestSlice avail, GuestSlice used)
    : memory_(&memory),
      size_(size),
      indirect_allowed_(features & kFeatureIndirectDesc),
      event_idx_(features & kFeatureEventIdx),
      desc_(desc),
      avail_(avail),
      used_(used) {}

Result<SplitQueue, RingError> SplitQueue::create(const GuestMemory& memory,
                                                 const QueueConfig& config, uint16_t max_size,
                                                 uint64_t features) {
    const uint16_t size = config.size;
    if (size == 0 || size > max_size || !std::has_single_bit(size))
        return Unexpected{RingError::BadQueueSize};
    auto desc = memory.slice(config.desc, sizeof(Descriptor) * size);
    auto avail = memory.slice(config.avail, avail_entry_offset(size) + 2);
    auto used = memory.slice(config.used, used_entry_offset(size) + 2);
    if (!desc || !avail || !used) return Unexpected{RingError::RingOutsideRam};
    if (!aligned(config.desc, *desc, 16) || !aligned(config.avail, *avail, 2) ||
        !aligned(config.used, *used, 4))
        return Unexpected{RingError::MisalignedRing};
    return SplitQueue(memory, size, features, *desc, *avail, *used);
}

Result<std::optional<DescriptorChain>, RingError> SplitQueue::pop(
    std::span<GuestBuffers::Part> parts) {
    if (parts.size() < size_)
        throw std::invalid_argument("SplitQueue::pop: room for too few parts");
    // Acquire: the ring entry and descriptors the driver wrote before idx are visible.
    const uint16_t avail_idx = avail_.load<uint16_t>(kIdxOffset, std::memory_order_acquire);
    const uint16_t pending = avail_idx - next_avail_;
    if (pending > size_) return Unexpected{RingError::AvailIndexJump};
    if (pending == 0) return std::optional<DescriptorChain>{};

    const uint16_t head =
        avail_.load<uint16_t>(avail_entry_offset(next_avail_ % size_), std::memory_order_relaxed);
    ++next_avail_;
    if (head >= size_) return Unexpected{RingError::HeadOutOfRange};
    DescriptorChain chain;
    chain.head = head;
    if (auto walked = walk(head, parts, chain); !walked) return Unexpected{walked.error()};
    return std::optional<DescriptorChain>{std::move(chain)};
}

bool SplitQueue::has_available() const {
    return avail_.load<uint16_t>(kIdxOffset, std::memory_order_acquire) != next_avail_;
}

Result<Ok, RingError> SplitQueue::walk(uint16_t head, std::span<GuestBuffers::Part> parts,
                                       DescriptorChain& chain) const {
    GuestSlice table = desc_;
    uint32_t budget = size_;  // a chain visits each descriptor at most once
    bool in_indirect = false;
    uint64_t total = 0;
    size_t readable = 0, count = 0;  // parts recorded; the readable ones come first
    uint16_t index = head;
    for (;;) {
        // Read once, then check the copy.  Past the end of the table is past its slice.
        auto copied = table.read_obj<Descriptor>(sizeof(Descriptor) * index);
        if (!copied) return Unexpected{RingError::NextOutOfRange};
        if (budget-- == 0) return Unexpected{RingError::ChainTooLong};
        const Descriptor d = *copied;

        if (d.flags & VRING_DESC_F_INDIRECT) {
            if (!indirect_allowed_) return Unexpected{RingError::IndirectNotNegotiated};
            if (in_indirect) return Unexpected{RingError::NestedIndirect};
            if (d.flags & VRING_DESC_F_NEXT) return Unexpected{RingError::IndirectWithNext};
            if (count != 0) return Unexpected{RingError::IndirectNotFirst};
            if (d.len == 0 || d.len % sizeof d != 0 || d.len / sizeof d > size_)
                return Unexpected{RingError::BadIndirectLength};
            auto indirect = memory_->slice(GuestAddr(d.addr), d.len);
            if (!indirect) return Unexpected{RingError::IndirectOutsideRam};
            table = *indirect;
            budget = d.len / sizeof d;
            in_indirect = true;
            index = 0;
            continue;
        }

        if (d.len == 0) return Unexpected{RingError::EmptyBuffer};
        auto buffer = memory_->slice(GuestAddr(d.addr), d.len);
        if (!buffer) return Unexpected{RingError::BufferOutsideRam};
        total += d.len;
        if (total > std::numeric_limits<uint32_t>::max())
            return Unexpected{RingError::ChainTooLarge};
        if (!(d.flags & VRING_DESC_F_WRITE)) {
            if (readable != count) return Unexpected{RingError::ReadableAfterWritable};
            ++readable;
        }
        // The budget keeps count below the queue size, which `parts` holds.
        std::construct_at(&parts[count++], *buffer);
        if (!(d.flags & VRING_DESC_F_NEXT)) {
            chain.readable = GuestBuffers(parts.first(readable));
            chain.writable = GuestBuffers(parts.subspan(readable, count - readable));
            return Ok{};
        }
        index = d.next;
    }
}

void SplitQueue::push_used(uint16_t head, uint32_t written) {
    const uint64_t element = used_entry_offset(next_used_ % size_);  // {id, len}
    used_.store<uint32_t>(element, head, std::memory_order_relaxed);
    used_.store<uint32_t>(element + 4, written, std::memory_order_relaxed);
    ++next_used_;
    // Release: the element and the data written into the buffers are visible before idx.
    used_.store<uint16_t>(kIdxOffset, next_used_, std::memory_order_release);
}

void SplitQueue::disable_notifications() {
    // With EVENT_IDX nothing to write: avail_event stays behind the driver's index, so the
    // driver does not kick again until enable_notifications() moves it.
    if (!event_idx_) used_.store<uint16_t>(0, VRING_USED_F_NO_NOTIFY, std::memory_order_relaxed);
}

bool SplitQueue::enable_notifications() {
    if (event_idx_)
        used_.store<uint16_t>(used_entry_offset(size_), next_avail_, std::memory_order_relaxed);
    else
        used_.store<uint16_t>(0, 0, std::memory_order_relaxed);
    // Store-load barrier: the driver must see the request for kicks before we re-read its
    // index, or a buffer it added in between (having seen kicks suppressed) is stranded.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return avail_.load<uint16_t>(kIdxOffset, std::memory_order_acquire) != next_avail_;
}

bool SplitQueue::should_notify() {
    // Store-load barrier: the used idx must be visible before we read the driver's wish,
    // the mirror image of what the driver does before it re-checks the used ring.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const uint16_t old_used = notified_used_;
    notified_used_ = next_used_;
    if (event_idx_) {
        const uint16_t used_event =
            avail_.load<uint16_t>(avail_entry_offset(size_), std::memory_order_relaxed);
        return need_event(used_event, next_used_, old_used);
    }
    return old_used != next_used_ &&
           !(avail_.load<uint16_t>(0, std::memory_order_relaxed) & VRING_AVAIL_F_NO_INTERRUPT);
}

}  // namespace mvmm::devices::virtio
