// Chains a fuzz input describes, published on a test driver's ring (the format fuzz_blk and
// the virtio-scsi targets share): until the input ends, u8 buffer count (1-8), and per buffer
// u16 length (at most 8 KiB), u8 writable, and for a readable buffer its `length` bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "devices/virtio/test_queue_driver.h"
#include "fuzz_support.h"

namespace mvmm::fuzz {

inline constexpr uint16_t kMaxChainBufferBytes = 8 << 10;

// Publishes the chains, at most `max_chains`; stops when the queue (`queue_size` descriptors)
// has none left or the buffers have taken `buffer_budget` bytes of guest RAM.  Returns how many
// chains it published.
inline unsigned add_chains(ByteReader& in, devices::virtio::testing::TestGuest& guest,
                           devices::virtio::testing::TestDriver& driver, uint16_t queue_size,
                           uint64_t buffer_budget, bool indirect, unsigned max_chains = ~0u) {
    unsigned descriptors = 0, chains = 0;
    uint64_t buffer_bytes = 0;
    while (!in.empty() && chains < max_chains) {
        const unsigned count = std::clamp<unsigned>(in.take<uint8_t>(), 1, 8);
        if (descriptors + (indirect ? 1 : count) > queue_size) return chains;
        descriptors += indirect ? 1 : count;
        std::vector<devices::virtio::testing::TestDriver::Buffer> buffers;
        for (unsigned i = 0; i < count; ++i) {
            const uint32_t length = std::min(in.take<uint16_t>(), kMaxChainBufferBytes);
            const bool writable = in.take<uint8_t>() & 1;
            buffer_bytes += length + 16;  // alloc's alignment
            if (buffer_bytes > buffer_budget) return chains;
            const GuestAddr at = guest.alloc(std::max(length, 1u));
            if (!writable) guest.write(at, in.take_bytes(length));
            buffers.push_back({at, length, writable});
        }
        if (indirect)
            driver.add_indirect_chain(buffers);
        else
            driver.add_chain(buffers);
        ++chains;
    }
    return chains;
}

}  // namespace mvmm::fuzz
