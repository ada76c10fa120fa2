#include "devices/virtio/queue.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>

#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio {
namespace {

namespace vt = testing;
using Buffer = vt::TestDriver::Buffer;

constexpr uint64_t kAllFeatures = kFeatureIndirectDesc | kFeatureEventIdx | kFeatureVersion1;
constexpr uint64_t kRamSize = 1 << 20;
constexpr uint16_t kMaxSize = 256;

class QueueTest : public ::testing::Test {
  protected:
    SplitQueue make(uint64_t features = kAllFeatures) {
        auto queue = SplitQueue::create(guest.memory(), driver.config(), kMaxSize, features);
        if (!queue) throw std::runtime_error(std::string(to_string(queue.error())));
        return std::move(queue).value();
    }
    std::optional<RingError> create_error(const QueueConfig& config) {
        auto queue = SplitQueue::create(guest.memory(), config, kMaxSize, kAllFeatures);
        if (queue) return std::nullopt;
        return queue.error();
    }
    // Room for the parts of a chain of the largest queue below.
    std::vector<GuestBuffers::Part> parts = std::vector<GuestBuffers::Part>(4096);
    // Pops one chain that must be there.
    DescriptorChain pop_chain(SplitQueue& queue) {
        auto popped = queue.pop(parts);
        if (!popped) throw std::runtime_error(std::string(to_string(popped.error())));
        if (!*popped) throw std::runtime_error("queue is empty");
        return std::move(**popped);
    }
    std::optional<RingError> pop_error(SplitQueue& queue) {
        auto popped = queue.pop(parts);
        if (popped) return std::nullopt;
        return popped.error();
    }
    // Publishes a chain whose descriptors are written by the test, head at 0.
    void publish_raw(std::initializer_list<vt::Desc> descs) {
        uint16_t index = 0;
        for (const auto& d : descs) driver.set_descriptor(index++, d);
        driver.publish(0);
    }
    std::optional<RingError> raw_chain_error(std::initializer_list<vt::Desc> descs,
                                             uint64_t features = kAllFeatures) {
        auto queue = make(features);
        publish_raw(descs);
        return pop_error(queue);
    }
    // An indirect table at a fresh address, holding `entries`.
    GuestAddr indirect_table(std::initializer_list<vt::Desc> entries) {
        const GuestAddr table = guest.alloc(16 * entries.size());
        uint64_t offset = 0;
        for (const auto& d : entries) {
            guest.write(table + offset, std::span(reinterpret_cast<const uint8_t*>(&d), 16));
            offset += 16;
        }
        return table;
    }

    vt::TestGuest guest{kRamSize};
    vt::TestDriver driver{guest, 8};
    GuestAddr data = guest.alloc(4096);
};

// --- layout checks at activation ---

TEST_F(QueueTest, AcceptsAValidLayout) {
    EXPECT_FALSE(create_error(driver.config()));
}

TEST_F(QueueTest, RejectsQueueSizesThatAreZeroNotAPowerOfTwoOrTooBig) {
    for (uint16_t size : {0, 3, 12, 512}) {
        auto config = driver.config();
        config.size = size;
        EXPECT_EQ(create_error(config), RingError::BadQueueSize) << size;
    }
}

TEST_F(QueueTest, RejectsMisalignedRings) {
    auto config = driver.config();
    config.desc = config.desc + 8;
    EXPECT_EQ(create_error(config), RingError::MisalignedRing);
    config = driver.config();
    config.avail = config.avail + 1;
    EXPECT_EQ(create_error(config), RingError::MisalignedRing);
    config = driver.config();
    config.used = config.used + 2;
    EXPECT_EQ(create_error(config), RingError::MisalignedRing);
}

TEST_F(QueueTest, RejectsRingsNotEntirelyInRam) {
    auto config = driver.config();
    config.desc = GuestAddr(kRamSize - 64);  // 8 descriptors need 128 bytes
    EXPECT_EQ(create_error(config), RingError::RingOutsideRam);
    config = driver.config();
    config.used = GuestAddr(kRamSize - 32);
    EXPECT_EQ(create_error(config), RingError::RingOutsideRam);
    config = driver.config();
    config.avail = GuestAddr(std::numeric_limits<uint64_t>::max() - 7);  // wraps around
    EXPECT_EQ(create_error(config), RingError::RingOutsideRam);
}

// --- well-formed chains ---

TEST_F(QueueTest, EmptyQueuePopsNothing) {
    auto queue = make();
    EXPECT_FALSE(queue.has_available());
    auto popped = queue.pop(parts);
    ASSERT_TRUE(popped);
    EXPECT_FALSE(*popped);
}

TEST_F(QueueTest, HasAvailableUntilEveryChainIsPopped) {
    auto queue = make();
    const Buffer chain[] = {{data, 16, false}};
    driver.add_chain(chain);
    driver.add_chain(chain);
    EXPECT_TRUE(queue.has_available());
    pop_chain(queue);
    EXPECT_TRUE(queue.has_available());
    pop_chain(queue);
    EXPECT_FALSE(queue.has_available());
    driver.set_avail_idx(100);  // a jump: pop() reports it
    EXPECT_TRUE(queue.has_available());
}

TEST_F(QueueTest, WritesOnlyThePartsAChainUses) {
    auto queue = make();
    uint8_t sentinel = 0;
    const GuestBuffers::Part untouched(std::span(&sentinel, 1));
    std::fill(parts.begin(), parts.end(), untouched);
    const Buffer buffers[] = {{data, 4, false}, {data + 100, 10, true}};
    driver.add_chain(buffers);
    pop_chain(queue);
    EXPECT_NE(parts[1], untouched);
    EXPECT_EQ(parts[2], untouched);
    std::vector<GuestBuffers::Part> too_few(driver.size() - 1);
    EXPECT_THROW((void)queue.pop(too_few), std::invalid_argument);
}

TEST_F(QueueTest, PopsReadableAndWritableBuffersInOrder) {
    auto queue = make();
    const std::vector<uint8_t> pattern = {1, 2, 3, 4, 5, 6};
    guest.write(data, pattern);
    const Buffer buffers[] = {{data, 4, false}, {data + 4, 2, false}, {data + 100, 10, true}};
    const uint16_t head = driver.add_chain(buffers);

    auto chain = pop_chain(queue);
    EXPECT_EQ(chain.head, head);
    EXPECT_EQ(chain.readable.size(), 6u);
    EXPECT_EQ(chain.readable.piece_count(), 2u);
    EXPECT_EQ(chain.writable.size(), 10u);
    std::vector<uint8_t> seen(6);
    EXPECT_EQ(chain.readable.copy_to(0, seen), 6u);
    EXPECT_EQ(seen, pattern);
    EXPECT_FALSE(pop_error(queue));
}

TEST_F(QueueTest, PushUsedPublishesHeadAndLength) {
    auto queue = make();
    const Buffer buffers[] = {{data, 16, true}};
    const uint16_t head = driver.add_chain(buffers);
    queue.push_used(pop_chain(queue).head, 12);
    EXPECT_EQ(driver.used_idx(), 1);
    EXPECT_EQ(driver.used(0).id, head);
    EXPECT_EQ(driver.used(0).len, 12u);
}

TEST_F(QueueTest, IndicesWrapAroundTheRing) {
    auto queue = make();
    for (int i = 0; i < 100; ++i) {
        const Buffer buffers[] = {{data, 8, false}, {data + 8, 1, true}};
        driver.add_chain(buffers);
        queue.push_used(pop_chain(queue).head, 1);
    }
    EXPECT_EQ(driver.used_idx(), 100);
}

TEST_F(QueueTest, PopsAnIndirectChain) {
    auto queue = make();
    const Buffer buffers[] = {{data, 16, false}, {data + 16, 512, true}, {data + 528, 1, true}};
    driver.add_indirect_chain(buffers);
    auto chain = pop_chain(queue);
    EXPECT_EQ(chain.readable.size(), 16u);
    EXPECT_EQ(chain.writable.size(), 513u);
}

TEST_F(QueueTest, AcceptsAChainJustUnder4GiB) {
    // 4096 descriptors may all point at the same 1 MiB: the total is what is checked.
    vt::TestGuest big_guest{4 << 20};
    vt::TestDriver big_driver{big_guest, 4096};
    const GuestAddr mib = big_guest.alloc(1 << 20);
    std::vector<Buffer> buffers(4096, Buffer{mib, 1 << 20, false});
    buffers.back().len = (1 << 20) - 1;  // total 2^32 - 1
    big_driver.add_chain(buffers);
    auto queue = SplitQueue::create(big_guest.memory(), big_driver.config(), 4096, 0);
    ASSERT_TRUE(queue);
    auto popped = queue->pop(parts);
    ASSERT_TRUE(popped);
    EXPECT_EQ((*popped)->readable.size(), std::numeric_limits<uint32_t>::max());
}

// --- hostile chains: each one is a ring error, never a crash or an access outside RAM ---

TEST_F(QueueTest, RejectsAChainOf4GiB) {
    vt::TestGuest big_guest{4 << 20};
    vt::TestDriver big_driver{big_guest, 4096};
    const GuestAddr mib = big_guest.alloc(1 << 20);
    const std::vector<Buffer> buffers(4096, Buffer{mib, 1 << 20, false});  // total 2^32
    big_driver.add_chain(buffers);
    auto queue = SplitQueue::create(big_guest.memory(), big_driver.config(), 4096, 0);
    ASSERT_TRUE(queue);
    EXPECT_EQ(pop_error(*queue), RingError::ChainTooLarge);
}

TEST_F(QueueTest, RejectsADescriptorLoop) {
    EXPECT_EQ(
        raw_chain_error({{data.value(), 8, vt::kDescNext, 1}, {data.value(), 8, vt::kDescNext, 0}}),
        RingError::ChainTooLong);
}

TEST_F(QueueTest, RejectsADescriptorPointingAtItself) {
    EXPECT_EQ(raw_chain_error({{data.value(), 8, vt::kDescNext, 0}}), RingError::ChainTooLong);
}

TEST_F(QueueTest, RejectsNextOutOfRange) {
    EXPECT_EQ(raw_chain_error({{data.value(), 8, vt::kDescNext, 8}}), RingError::NextOutOfRange);
}

TEST_F(QueueTest, RejectsAnAvailableHeadOutOfRange) {
    auto queue = make();
    driver.publish(8);
    EXPECT_EQ(pop_error(queue), RingError::HeadOutOfRange);
}

TEST_F(QueueTest, RejectsAnAvailableIndexThatJumpsPastTheQueueSize) {
    auto queue = make();
    driver.set_avail_idx(9);
    EXPECT_EQ(pop_error(queue), RingError::AvailIndexJump);
}

TEST_F(QueueTest, RejectsABufferOutsideRam) {
    EXPECT_EQ(raw_chain_error({{kRamSize - 4, 8, 0, 0}}), RingError::BufferOutsideRam);
    EXPECT_EQ(raw_chain_error({{kRamSize + 4096, 8, 0, 0}}), RingError::BufferOutsideRam);
}

TEST_F(QueueTest, RejectsAnAddressPlusLengthThatWrapsAround) {
    EXPECT_EQ(raw_chain_error({{std::numeric_limits<uint64_t>::max() - 3, 16, 0, 0}}),
              RingError::BufferOutsideRam);
}

TEST_F(QueueTest, RejectsAReadableBufferAfterAWritableOne) {
    EXPECT_EQ(raw_chain_error(
                  {{data.value(), 8, vt::kDescWrite | vt::kDescNext, 1}, {data.value(), 8, 0, 0}}),
              RingError::ReadableAfterWritable);
}

TEST_F(QueueTest, RejectsAZeroLengthBuffer) {
    EXPECT_EQ(raw_chain_error({{data.value(), 0, 0, 0}}), RingError::EmptyBuffer);
    EXPECT_EQ(raw_chain_error({{data.value(), 8, vt::kDescNext, 1}, {data.value(), 0, 0, 0}}),
              RingError::EmptyBuffer);
}

TEST_F(QueueTest, RejectsIndirectWhenNotNegotiated) {
    const GuestAddr table = indirect_table({{data.value(), 8, 0, 0}});
    EXPECT_EQ(raw_chain_error({{table.value(), 16, vt::kDescIndirect, 0}}, kFeatureEventIdx),
              RingError::IndirectNotNegotiated);
}

TEST_F(QueueTest, RejectsNestedIndirectTables) {
    const GuestAddr inner = indirect_table({{data.value(), 8, 0, 0}});
    const GuestAddr outer = indirect_table({{inner.value(), 16, vt::kDescIndirect, 0}});
    EXPECT_EQ(raw_chain_error({{outer.value(), 16, vt::kDescIndirect, 0}}),
              RingError::NestedIndirect);
}

TEST_F(QueueTest, RejectsIndirectWithNext) {
    const GuestAddr table = indirect_table({{data.value(), 8, 0, 0}});
    EXPECT_EQ(raw_chain_error({{table.value(), 16, vt::kDescIndirect | vt::kDescNext, 1},
                               {data.value(), 8, 0, 0}}),
              RingError::IndirectWithNext);
}

TEST_F(QueueTest, RejectsIndirectAfterDirectBuffers) {
    const GuestAddr table = indirect_table({{data.value(), 8, 0, 0}});
    EXPECT_EQ(raw_chain_error(
                  {{data.value(), 8, vt::kDescNext, 1}, {table.value(), 16, vt::kDescIndirect, 0}}),
              RingError::IndirectNotFirst);
}

TEST_F(QueueTest, RejectsBadIndirectTableLengths) {
    const GuestAddr table = indirect_table({{data.value(), 8, 0, 0}, {data.value(), 8, 0, 0}});
    for (uint32_t len : {0u, 8u, 24u, 16u * 9}) {  // 9 entries > queue size 8
        EXPECT_EQ(raw_chain_error({{table.value(), len, vt::kDescIndirect, 0}}),
                  RingError::BadIndirectLength)
            << len;
    }
}

TEST_F(QueueTest, RejectsAnIndirectTableOutsideRam) {
    EXPECT_EQ(raw_chain_error({{kRamSize - 16, 32, vt::kDescIndirect, 0}}),
              RingError::IndirectOutsideRam);
    EXPECT_EQ(
        raw_chain_error({{std::numeric_limits<uint64_t>::max() - 15, 32, vt::kDescIndirect, 0}}),
        RingError::IndirectOutsideRam);
}

TEST_F(QueueTest, RejectsALoopInsideAnIndirectTable) {
    const GuestAddr table =
        indirect_table({{data.value(), 8, vt::kDescNext, 1}, {data.value(), 8, vt::kDescNext, 0}});
    EXPECT_EQ(raw_chain_error({{table.value(), 32, vt::kDescIndirect, 0}}),
              RingError::ChainTooLong);
}

TEST_F(QueueTest, RejectsNextPastTheEndOfAnIndirectTable) {
    // Index 5 exists in the queue's table but not in this 2-entry indirect table.
    const GuestAddr table =
        indirect_table({{data.value(), 8, vt::kDescNext, 5}, {data.value(), 8, 0, 0}});
    EXPECT_EQ(raw_chain_error({{table.value(), 32, vt::kDescIndirect, 0}}),
              RingError::NextOutOfRange);
}

TEST_F(QueueTest, RejectsBuffersOutsideRamInsideAnIndirectTable) {
    const GuestAddr table = indirect_table({{kRamSize - 1, 2, 0, 0}});
    EXPECT_EQ(raw_chain_error({{table.value(), 16, vt::kDescIndirect, 0}}),
              RingError::BufferOutsideRam);
}

// --- notification suppression ---

TEST_F(QueueTest, WithoutEventIdxUsesRingFlags) {
    auto queue = make(kFeatureIndirectDesc);
    queue.disable_notifications();
    EXPECT_EQ(driver.used_flags(), 1);  // VRING_USED_F_NO_NOTIFY
    EXPECT_FALSE(queue.enable_notifications());
    EXPECT_EQ(driver.used_flags(), 0);

    EXPECT_FALSE(queue.should_notify()) << "nothing used yet";
    queue.push_used(0, 0);
    EXPECT_TRUE(queue.should_notify());
    driver.set_avail_flags(1);  // VRING_AVAIL_F_NO_INTERRUPT
    queue.push_used(0, 0);
    EXPECT_FALSE(queue.should_notify());
}

TEST_F(QueueTest, EnableNotificationsReportsBuffersThatArrivedMeanwhile) {
    auto queue = make();
    const Buffer buffers[] = {{data, 8, false}};
    driver.add_chain(buffers);
    queue.disable_notifications();
    pop_chain(queue);
    EXPECT_FALSE(queue.enable_notifications());
    EXPECT_EQ(driver.avail_event(), 1) << "driver should kick when it publishes entry 1";

    driver.add_chain(buffers);  // the driver saw avail_event == 1 and would kick, but...
    queue.disable_notifications();
    driver.add_chain(buffers);  // ...this one it adds while the device is draining
    pop_chain(queue);
    EXPECT_TRUE(queue.enable_notifications());
    pop_chain(queue);
    EXPECT_FALSE(queue.enable_notifications());
    EXPECT_EQ(driver.avail_event(), 3);
}

TEST_F(QueueTest, EventIdxInterruptsWhenUsedEventIsCrossed) {
    auto queue = make();
    driver.set_used_event(0);
    queue.push_used(0, 0);  // used idx 0 -> 1 crosses used_event 0
    EXPECT_TRUE(queue.should_notify());
    EXPECT_FALSE(queue.should_notify()) << "nothing new";

    driver.set_used_event(5);
    bool notified[8] = {};
    for (int used = 2; used <= 7; ++used) {
        queue.push_used(0, 0);
        notified[used] = queue.should_notify();
    }
    EXPECT_FALSE(notified[2] || notified[3] || notified[4] || notified[5] || notified[7]);
    EXPECT_TRUE(notified[6]) << "used idx 5 -> 6 crosses used_event 5";

    // One decision for a batch: crossing anywhere inside it counts.
    driver.set_used_event(8);
    for (int i = 0; i < 3; ++i) queue.push_used(0, 0);  // 7 -> 10
    EXPECT_TRUE(queue.should_notify());
}

// --- the byte-stream view of a chain ---

TEST(GuestBuffersTest, SlicesAndCopiesAcrossParts) {
    std::vector<uint8_t> a(4), b(3), c(5);
    const GuestBuffers::Part parts[] = {GuestSlice(a), GuestSlice(b), GuestSlice(c)};
    const GuestBuffers buffers(parts);
    EXPECT_EQ(buffers.size(), 12u);
    EXPECT_EQ(buffers.piece_count(), 3u);

    std::vector<uint8_t> in(12);
    std::iota(in.begin(), in.end(), 1);
    EXPECT_EQ(buffers.copy_from(0, in), 12u);
    EXPECT_EQ(b, (std::vector<uint8_t>{5, 6, 7}));

    auto middle = buffers.slice(3, 6);  // bytes 4..9
    EXPECT_EQ(middle.size(), 6u);
    EXPECT_EQ(middle.piece_count(), 3u);
    std::vector<size_t> pieces;
    for (const auto piece : middle) pieces.push_back(piece.size());
    EXPECT_EQ(pieces, (std::vector<size_t>{1, 3, 2})) << "the first and last parts are cut";
    const auto inner = *middle.slice(1, 4).begin();  // stream byte 4: the start of b
    EXPECT_EQ(inner, GuestSlice(b)) << "a slice of a slice starts in the right part";
    std::vector<uint8_t> out(6);
    EXPECT_EQ(middle.copy_to(0, out), 6u);
    EXPECT_EQ(out, (std::vector<uint8_t>{4, 5, 6, 7, 8, 9}));

    EXPECT_EQ(buffers.slice(10, 100).size(), 2u) << "clamped at the end";
    EXPECT_EQ(buffers.copy_to(11, out), 1u);
    EXPECT_TRUE(buffers.slice(12, 1).empty());
}

}  // namespace
}  // namespace mvmm::devices::virtio
