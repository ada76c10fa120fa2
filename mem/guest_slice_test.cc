#include "mem/guest_slice.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "mem/guest_memory.h"

namespace mvmm {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// 64 bytes counting up from 0, 8-aligned, seen as guest memory.
class GuestSliceTest : public ::testing::Test {
  protected:
    GuestSliceTest() { std::iota(bytes.begin(), bytes.end(), 0); }
    alignas(8) std::array<uint8_t, 64> bytes;
    const GuestSlice slice{bytes};
};

std::optional<MemError> subslice_error(const GuestSlice& slice, uint64_t offset, uint64_t length) {
    auto sub = slice.subslice(offset, length);
    if (sub) return std::nullopt;
    return sub.error();
}

TEST_F(GuestSliceTest, AnEmptySliceHoldsNothing) {
    const GuestSlice empty;
    EXPECT_TRUE(empty.empty());
    EXPECT_EQ(empty.size(), 0u);
    EXPECT_TRUE(empty.copy_to(0, {}));
    uint8_t byte;
    EXPECT_EQ(empty.copy_to(0, {&byte, 1}).error(), MemError::OutOfRange);
    EXPECT_EQ(slice.size(), 64u);
    EXPECT_FALSE(slice.empty());
}

TEST_F(GuestSliceTest, SubslicesStayInside) {
    auto middle = slice.subslice(8, 16);
    ASSERT_TRUE(middle);
    EXPECT_EQ(*middle, GuestSlice(std::span(bytes).subspan(8, 16)));
    auto inner = middle->subslice(4, 4);
    ASSERT_TRUE(inner);
    EXPECT_EQ(*inner, GuestSlice(std::span(bytes).subspan(12, 4))) << "offsets add up";
    EXPECT_EQ(inner->read_obj<uint8_t>(0).value(), 12);

    EXPECT_FALSE(subslice_error(slice, 0, 64)) << "the whole slice";
    EXPECT_FALSE(subslice_error(slice, 64, 0)) << "nothing at the end";
    EXPECT_EQ(subslice_error(slice, 64, 1), MemError::OutOfRange);
    EXPECT_EQ(subslice_error(slice, 65, 0), MemError::OutOfRange);
    EXPECT_EQ(subslice_error(*middle, 8, 9), MemError::OutOfRange) << "not into the parent";
}

TEST_F(GuestSliceTest, OffsetsThatWrapAreRejected) {
    EXPECT_EQ(subslice_error(slice, 1, kMax), MemError::Overflow);
    EXPECT_EQ(subslice_error(slice, kMax, 2), MemError::Overflow);
    EXPECT_EQ(subslice_error(slice, kMax, 0), MemError::OutOfRange);
    std::array<uint8_t, 2> out{};
    EXPECT_EQ(slice.copy_to(kMax, out).error(), MemError::Overflow);
    EXPECT_EQ(slice.copy_from(kMax - 1, out).error(), MemError::Overflow);
    EXPECT_EQ(slice.read_obj<uint32_t>(kMax - 2).error(), MemError::Overflow);
}

TEST_F(GuestSliceTest, CopiesAreAllOrNothing) {
    const std::vector<uint8_t> in = {0xa1, 0xa2, 0xa3};
    ASSERT_TRUE(slice.copy_from(61, in));
    std::vector<uint8_t> out(4);
    ASSERT_TRUE(slice.copy_to(60, out));
    EXPECT_EQ(out, (std::vector<uint8_t>{60, 0xa1, 0xa2, 0xa3}));

    EXPECT_EQ(slice.copy_to(61, out).error(), MemError::OutOfRange);
    EXPECT_EQ(out, (std::vector<uint8_t>{60, 0xa1, 0xa2, 0xa3})) << "nothing copied out";
    EXPECT_EQ(slice.copy_from(62, in).error(), MemError::OutOfRange);
    EXPECT_EQ(bytes[62], 0xa2) << "nothing copied in";
    EXPECT_TRUE(slice.copy_from(64, {})) << "nothing at the end";
}

TEST_F(GuestSliceTest, ObjectsAreCopiedInAndOut) {
    struct Header {
        uint32_t type;
        uint32_t reserved;
        uint64_t sector;
    };
    ASSERT_TRUE(slice.write_obj(8, Header{.type = 1, .reserved = 0, .sector = 0x1122334455}));
    const auto header = slice.read_obj<Header>(8);
    ASSERT_TRUE(header);
    EXPECT_EQ(header->type, 1u);
    EXPECT_EQ(header->sector, 0x1122334455u);
    bytes[8] = 7;
    EXPECT_EQ(header->type, 1u) << "a copy, not a view";
    EXPECT_EQ(slice.read_obj<Header>(56).error(), MemError::OutOfRange);
    EXPECT_EQ(slice.write_obj(49, Header{}).error(), MemError::OutOfRange);
}

TEST_F(GuestSliceTest, RingFieldsAreLoadedAndStoredInPlace) {
    slice.store<uint16_t>(2, 0xbeef, std::memory_order_release);
    slice.store<uint32_t>(4, 0x12345678, std::memory_order_relaxed);
    EXPECT_EQ(slice.load<uint16_t>(2, std::memory_order_acquire), 0xbeef);
    EXPECT_EQ(slice.load<uint32_t>(4, std::memory_order_relaxed), 0x12345678u);
    EXPECT_EQ(slice.read_obj<uint16_t>(2).value(), 0xbeef) << "the same bytes a copy sees";
    EXPECT_EQ(slice.load<uint16_t>(62, std::memory_order_relaxed), 0x3f3e) << "the last field";
    EXPECT_EQ(slice.subslice(4, 4)->load<uint32_t>(0, std::memory_order_relaxed), 0x12345678u);
}

TEST_F(GuestSliceTest, ABadRingFieldIsABug) {
    EXPECT_THROW(slice.load<uint16_t>(64, std::memory_order_relaxed), std::out_of_range);
    EXPECT_THROW(slice.load<uint32_t>(62, std::memory_order_relaxed), std::out_of_range);
    EXPECT_THROW(slice.store<uint16_t>(kMax, 1, std::memory_order_relaxed), std::out_of_range);
    EXPECT_THROW(slice.load<uint16_t>(1, std::memory_order_relaxed), std::out_of_range)
        << "misaligned";
    EXPECT_THROW(slice.store<uint32_t>(2, 1, std::memory_order_relaxed), std::out_of_range);
    EXPECT_THROW(slice.subslice(1, 8)->load<uint16_t>(0, std::memory_order_relaxed),
                 std::out_of_range)
        << "host alignment counts, not the offset";
}

TEST_F(GuestSliceTest, ReportsHostAlignment) {
    EXPECT_TRUE(slice.aligned(8));
    EXPECT_TRUE(slice.subslice(4, 4)->aligned(4));
    EXPECT_FALSE(slice.subslice(4, 4)->aligned(8));
    EXPECT_FALSE(slice.subslice(1, 4)->aligned(2));
}

TEST_F(GuestSliceTest, AnIovecCoversTheSlice) {
    const iovec whole = slice.as_iovec();
    EXPECT_EQ(whole.iov_base, bytes.data());
    EXPECT_EQ(whole.iov_len, 64u);
    const iovec part = slice.subslice(10, 5)->as_iovec();
    EXPECT_EQ(part.iov_base, bytes.data() + 10);
    EXPECT_EQ(part.iov_len, 5u);
}

// Two regions with a hole between them: [0, 64 KiB) and [1 MiB, 1 MiB + 64 KiB).
GuestMemory two_regions() {
    std::vector<RamRegion> regions;
    regions.push_back(RamRegion{GuestAddr(0), Mapping::anonymous(64 << 10)});
    regions.push_back(RamRegion{GuestAddr(1 << 20), Mapping::anonymous(64 << 10)});
    return GuestMemory(std::move(regions));
}

TEST(GuestMemorySliceTest, ASliceLiesInOneRegion) {
    const GuestMemory memory = two_regions();
    auto ring = memory.slice(GuestAddr((1 << 20) + 16), 32);
    ASSERT_TRUE(ring);
    EXPECT_EQ(ring->size(), 32u);
    ring->store<uint16_t>(2, 0x55aa, std::memory_order_release);
    EXPECT_EQ(memory.read<uint16_t>(GuestAddr((1 << 20) + 18)).value(), 0x55aa);

    EXPECT_TRUE(memory.slice(GuestAddr(0), 64 << 10)) << "a whole region";
    EXPECT_EQ(memory.slice(GuestAddr((64 << 10) - 1), 2).error(), MemError::OutOfRange);
    EXPECT_EQ(memory.slice(GuestAddr(1 << 19), 1).error(), MemError::OutOfRange) << "the hole";
    EXPECT_EQ(memory.slice(GuestAddr(16), kMax).error(), MemError::Overflow);
    EXPECT_FALSE(memory.contains(GuestAddr((1 << 20) + (64 << 10)), 1));
}

}  // namespace
}  // namespace mvmm
