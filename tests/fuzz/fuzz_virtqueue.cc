// fuzz_virtqueue: a hostile driver's split virtqueue, walked by the real SplitQueue, and the
// guest buffers it hands out read and written as a device would.
//
// Input (little endian):
//   u16 queue size, u8 feature bits (1: INDIRECT_DESC, 2: EVENT_IDX),
//   u32 descriptor table, u32 driver area, u32 device area (guest-physical; RAM is 64 KiB at 0),
//   u16 n, then n bytes of guest RAM from address 0,
//   then pokes until the end: u16 address, u16 value, u8 pops -- the driver writes the value
//   (a ring index, a descriptor field) and the device pops that many chains.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "devices/virtio/queue.h"
#include "devices/virtio/test_queue_driver.h"
#include "fuzz_support.h"

namespace {

using namespace mvmm;
using namespace mvmm::devices::virtio;

constexpr uint64_t kRamBytes = 64 << 10;
constexpr uint16_t kMaxQueueSize = 256;

// What a device does with a chain: reads every readable byte, fills the writable ones.
uint32_t serve(const DescriptorChain& chain) {
    std::vector<uint8_t> bytes(chain.readable.size());
    chain.readable.copy_to(0, bytes);
    const auto tail = chain.readable.slice(chain.readable.size() / 2, 7);
    tail.copy_to(0, std::span(bytes).first(tail.size()));
    std::vector<uint8_t> fill(chain.writable.size(), 0xa5);
    return static_cast<uint32_t>(chain.writable.copy_from(0, fill));
}

// Pops up to `count` chains; false once the queue is broken (the device would need a reset).
bool pop_chains(SplitQueue& queue, unsigned count) {
    std::vector<GuestBuffers::Part> parts(queue.size());
    for (unsigned i = 0; i < count; ++i) {
        auto chain = queue.pop(parts);
        if (!chain) return false;
        if (!*chain) break;
        queue.push_used((*chain)->head, serve(**chain));
    }
    (void)queue.should_notify();
    queue.disable_notifications();
    (void)queue.enable_notifications();
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const devices::virtio::testing::TestGuest guest(kRamBytes);
    fuzz::ByteReader in({data, size});
    QueueConfig config;
    config.size = in.take<uint16_t>();
    const auto feature_bits = in.take<uint8_t>();
    const uint64_t features = ((feature_bits & 1) ? kFeatureIndirectDesc : 0) |
                              ((feature_bits & 2) ? kFeatureEventIdx : 0) | kFeatureVersion1;
    config.desc = GuestAddr(in.take<uint32_t>());
    config.avail = GuestAddr(in.take<uint32_t>());
    config.used = GuestAddr(in.take<uint32_t>());
    config.ready = true;

    static const std::vector<uint8_t> zeroes(kRamBytes);
    guest.write(GuestAddr(0), zeroes);
    guest.write(GuestAddr(0), in.take_bytes(in.take<uint16_t>()));

    auto queue = SplitQueue::create(guest.memory(), config, kMaxQueueSize, features);
    if (!queue) return 0;
    while (!in.empty()) {
        const auto address = in.take<uint16_t>();
        const auto value = in.take<uint16_t>();
        if (address + sizeof value <= kRamBytes)
            guest.write(GuestAddr(address), fuzz::bytes_of(value));
        if (!pop_chains(*queue, in.take<uint8_t>())) break;
    }
    return 0;
}
