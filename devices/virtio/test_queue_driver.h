// Test support (linked into tests only): guest RAM with a bump allocator, and the driver
// side of one split virtqueue built in it, so tests can play a well-behaved or hostile
// driver.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "devices/virtio/virtio_device.h"
#include "mem/guest_memory.h"

namespace mvmm::devices::virtio::testing {

inline constexpr uint16_t kDescNext = 1;
inline constexpr uint16_t kDescWrite = 2;
inline constexpr uint16_t kDescIndirect = 4;

struct Desc {
    uint64_t addr = 0;
    uint32_t len = 0;
    uint16_t flags = 0;
    uint16_t next = 0;
};

struct UsedElement {
    uint32_t id = 0;
    uint32_t len = 0;
};

// Counts the interrupts a device sends; readable from the test thread while I/O threads send.
class FakeInterrupt : public Interrupt {
  public:
    void notify_queue(uint16_t queue) override {
        last_queue = queue;
        ++queue_notifications;
    }
    void notify_config() override { ++config_notifications; }

    std::atomic<int> queue_notifications{0};
    std::atomic<int> config_notifications{0};
    std::atomic<int> last_queue{-1};
};

// Guest RAM at guest-physical 0.
class TestGuest {
  public:
    explicit TestGuest(uint64_t ram_size = 1 << 20);
    const GuestMemory& memory() const noexcept { return memory_; }
    // Fresh zeroed guest memory; throws when RAM is exhausted.
    GuestAddr alloc(uint64_t size, uint64_t alignment = 16);
    void write(GuestAddr addr, std::span<const uint8_t> bytes) const;
    std::vector<uint8_t> read(GuestAddr addr, uint64_t size) const;

  private:
    GuestMemory memory_;
    uint64_t next_free_ = 0;
};

class TestDriver {
  public:
    // Places the three rings of a `size`-entry queue in `guest`.
    TestDriver(TestGuest& guest, uint16_t size);

    QueueConfig config() const;
    uint16_t size() const noexcept { return size_; }

    // Raw access, for hostile drivers.
    void set_descriptor(uint16_t index, const Desc& desc);
    void publish(uint16_t head);  // appends to the available ring and bumps its idx
    void set_avail_idx(uint16_t idx);
    void set_avail_flags(uint16_t flags);
    void set_used_event(uint16_t idx);

    struct Buffer {
        GuestAddr addr;
        uint32_t len;
        bool writable;
    };
    // Writes `buffers` as one chain into free descriptors, publishes it, returns the head.
    uint16_t add_chain(std::span<const Buffer> buffers);
    // Writes `buffers` as an indirect table and publishes a one-descriptor chain pointing at it.
    uint16_t add_indirect_chain(std::span<const Buffer> buffers);

    uint16_t used_idx() const;
    uint16_t used_flags() const;
    uint16_t avail_event() const;
    UsedElement used(uint16_t position) const;

  private:
    uint16_t next_descriptor();
    GuestSlice ring_index(GuestAddr addr) const;
    template <class T>
    void put(GuestAddr addr, const T& value) const;
    template <class T>
    T get(GuestAddr addr) const;

    TestGuest& guest_;
    uint16_t size_;
    GuestAddr desc_, avail_, used_;
    uint16_t avail_idx_ = 0;
    uint16_t free_descriptor_ = 0;
};

}  // namespace mvmm::devices::virtio::testing
