#include "devices/virtio/blk/request.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <limits>
#include <ostream>

namespace mvmm::devices::virtio::blk {

// gtest says which error, not its bytes.
void PrintTo(const BlkError& error, std::ostream* out) {
    *out << error.what;
}

namespace {

constexpr uint32_t kIn = 0, kOut = 1, kFlush = 4, kGetId = 8, kGetLifetime = 10, kDiscard = 11,
                   kWriteZeroes = 13, kSecureErase = 14;
constexpr uint32_t kUnmap = 1;

struct Seg {
    uint64_t sector;
    uint32_t num_sectors;
    uint32_t flags;
};

// Chains built from host buffers: parsing only needs checked spans, not guest memory.
class RequestTest : public ::testing::Test {
  private:
    std::deque<std::vector<uint8_t>> storage_;  // stable addresses; before its users below
    std::deque<std::vector<GuestBuffers::Part>> part_lists_;

  protected:
    std::span<uint8_t> buffer(size_t size) { return storage_.emplace_back(size); }
    // Host buffers seen as guest memory, as the chain's parts.
    std::span<const GuestBuffers::Part> parts(std::initializer_list<std::span<uint8_t>> buffers) {
        auto& list = part_lists_.emplace_back();
        for (auto bytes : buffers) list.emplace_back(bytes);
        return list;
    }
    std::span<uint8_t> header(uint32_t type, uint64_t sector = 0) {
        auto bytes = buffer(16);
        std::memcpy(bytes.data(), &type, 4);
        std::memcpy(bytes.data() + 8, &sector, 8);
        return bytes;
    }
    std::span<uint8_t> segments(std::initializer_list<Seg> segs) {
        auto bytes = buffer(16 * segs.size());
        std::memcpy(bytes.data(), std::data(segs), bytes.size());
        return bytes;
    }
    DescriptorChain chain(std::initializer_list<std::span<uint8_t>> readable,
                          std::initializer_list<std::span<uint8_t>> writable) {
        DescriptorChain c;
        c.readable = GuestBuffers(parts(readable));
        c.writable = GuestBuffers(parts(writable));
        return c;
    }
    std::optional<BlkError> error_of(const DescriptorChain& c) {
        auto request = parse(c, disk);
        if (request) return std::nullopt;
        return request.error();
    }
    Request parsed(const DescriptorChain& c) {
        auto request = parse(c, disk);
        if (!request) throw std::runtime_error(std::string(request.error().what));
        return std::move(request).value();
    }

    DiskInfo disk{.capacity_sectors = 100,
                  .read_only = false,
                  .max_discard_sectors = 64,
                  .max_discard_segments = 2,
                  .max_write_zeroes_sectors = 32,
                  .max_write_zeroes_segments = 1};
    std::span<uint8_t> status = buffer(1);
};

// --- well-formed requests ---

TEST_F(RequestTest, ParsesARead) {
    auto data = buffer(1024);
    const auto request = parsed(chain({header(kIn, 10)}, {data, status}));
    EXPECT_EQ(request.type, RequestType::In);
    EXPECT_EQ(request.offset, 10u * 512);
    ASSERT_EQ(request.data.piece_count(), 1u);
    EXPECT_EQ(*request.data.begin(), GuestSlice(data));
    EXPECT_EQ(request.data.size(), 1024u);
}

TEST_F(RequestTest, ParsesAWriteFromSeveralBuffers) {
    const auto request = parsed(chain({header(kOut, 98), buffer(512), buffer(512)}, {status}));
    EXPECT_EQ(request.type, RequestType::Out);
    EXPECT_EQ(request.offset, 98u * 512);
    EXPECT_EQ(request.data.size(), 1024u) << "reaches exactly the end of the disk";
}

TEST_F(RequestTest, AcceptsAnyLayout) {
    // Header split over two buffers, data in the same buffer as the status byte.
    auto whole = header(kIn, 3);
    auto data_and_status = buffer(513);
    const auto request = parsed(chain({whole.subspan(0, 5), whole.subspan(5)}, {data_and_status}));
    EXPECT_EQ(request.offset, 3u * 512);
    EXPECT_EQ(request.data.size(), 512u);
    EXPECT_EQ(*request.data.begin(), GuestSlice(data_and_status.first(512)));
}

TEST_F(RequestTest, ParsesFlushAndGetId) {
    EXPECT_EQ(parsed(chain({header(kFlush)}, {status})).type, RequestType::Flush);
    auto id = buffer(32);
    const auto request = parsed(chain({header(kGetId)}, {id, status}));
    EXPECT_EQ(request.type, RequestType::GetId);
    EXPECT_EQ(request.data.size(), 20u);
}

TEST_F(RequestTest, ParsesDiscardAndWriteZeroesSegments) {
    auto discard = parsed(chain({header(kDiscard), segments({
                                                       {1, 2, 0},
                                                       {50, 0, 0},
                                                   })},
                                {status}));
    EXPECT_EQ(discard.ranges, (DiskRanges{{512, 1024, false}}))
        << "a zero-sector segment is dropped";
    auto zeroes = parsed(chain({header(kWriteZeroes), segments({{68, 32, kUnmap}})}, {status}));
    EXPECT_EQ(zeroes.ranges, (DiskRanges{{68 * 512, 32 * 512, true}}));
}

// --- every kind of bad request ---

TEST_F(RequestTest, NeedsAStatusByte) {
    EXPECT_EQ(error_of(chain({header(kIn)}, {})), blk_error::kNoStatusByte);
}

TEST_F(RequestTest, NeedsA16ByteHeader) {
    EXPECT_EQ(error_of(chain({buffer(15)}, {buffer(512), status})), blk_error::kHeaderTooShort);
    EXPECT_EQ(error_of(chain({}, {buffer(512), status})), blk_error::kHeaderTooShort);
}

TEST_F(RequestTest, RejectsUnsupportedTypesWithUnsupp) {
    for (uint32_t type : {2u, kGetLifetime, kSecureErase, 0x80000000u})
        EXPECT_EQ(error_of(chain({header(type)}, {buffer(512), status})),
                  blk_error::kUnsupportedType)
            << type;
    EXPECT_EQ(blk_error::kUnsupportedType.status, Status::Unsupported);
}

TEST_F(RequestTest, RejectsDataInTheWrongDirection) {
    EXPECT_EQ(error_of(chain({header(kIn), buffer(512)}, {buffer(512), status})),
              blk_error::kWrongDirection);
    EXPECT_EQ(error_of(chain({header(kOut), buffer(512)}, {buffer(512), status})),
              blk_error::kWrongDirection);
    EXPECT_EQ(error_of(chain({header(kGetId), buffer(4)}, {buffer(20), status})),
              blk_error::kWrongDirection);
    EXPECT_EQ(error_of(chain({header(kDiscard), segments({{0, 1, 0}})}, {buffer(16), status})),
              blk_error::kWrongDirection);
}

TEST_F(RequestTest, RejectsAFlushWithData) {
    EXPECT_EQ(error_of(chain({header(kFlush), buffer(512)}, {status})), blk_error::kUnexpectedData);
    EXPECT_EQ(error_of(chain({header(kFlush)}, {buffer(512), status})), blk_error::kUnexpectedData);
}

TEST_F(RequestTest, RejectsTransfersWithoutData) {
    EXPECT_EQ(error_of(chain({header(kIn)}, {status})), blk_error::kNoData);
    EXPECT_EQ(error_of(chain({header(kOut)}, {status})), blk_error::kNoData);
    EXPECT_EQ(error_of(chain({header(kDiscard)}, {status})), blk_error::kNoData);
    EXPECT_EQ(error_of(chain({header(kWriteZeroes)}, {status})), blk_error::kNoData);
}

TEST_F(RequestTest, RejectsLengthsThatAreNotWholeUnits) {
    EXPECT_EQ(error_of(chain({header(kIn)}, {buffer(513), status})), blk_error::kUnalignedLength);
    EXPECT_EQ(error_of(chain({header(kOut), buffer(100)}, {status})), blk_error::kUnalignedLength);
    EXPECT_EQ(error_of(chain({header(kDiscard), buffer(17)}, {status})),
              blk_error::kUnalignedLength);
}

TEST_F(RequestTest, RejectsRequestsPastTheEndOfTheDisk) {
    EXPECT_EQ(error_of(chain({header(kIn, 99)}, {buffer(1024), status})), blk_error::kOutOfRange);
    EXPECT_EQ(error_of(chain({header(kOut, 100), buffer(512)}, {status})), blk_error::kOutOfRange);
    // sector * 512 and sector + count would wrap around.
    EXPECT_EQ(
        error_of(chain({header(kIn, std::numeric_limits<uint64_t>::max())}, {buffer(512), status})),
        blk_error::kOutOfRange);
    EXPECT_EQ(error_of(chain({header(kIn, 1ull << 55)}, {buffer(512), status})),
              blk_error::kOutOfRange);
    EXPECT_EQ(error_of(chain({header(kDiscard), segments({{90, 11, 0}})}, {status})),
              blk_error::kOutOfRange);
    EXPECT_EQ(error_of(chain(
                  {header(kWriteZeroes), segments({{std::numeric_limits<uint64_t>::max(), 2, 0}})},
                  {status})),
              blk_error::kOutOfRange);
}

TEST_F(RequestTest, RefusesWritesToAReadOnlyDisk) {
    disk.read_only = true;
    EXPECT_EQ(error_of(chain({header(kOut), buffer(512)}, {status})), blk_error::kReadOnly);
    EXPECT_EQ(error_of(chain({header(kDiscard), segments({{0, 1, 0}})}, {status})),
              blk_error::kReadOnly);
    EXPECT_EQ(error_of(chain({header(kWriteZeroes), segments({{0, 1, 0}})}, {status})),
              blk_error::kReadOnly);
    EXPECT_EQ(blk_error::kReadOnly.status, Status::IoError);
    EXPECT_FALSE(error_of(chain({header(kIn)}, {buffer(512), status})));
}

TEST_F(RequestTest, RejectsAGetIdBufferShorterThan20Bytes) {
    EXPECT_EQ(error_of(chain({header(kGetId)}, {buffer(19), status})),
              blk_error::kIdBufferTooShort);
}

TEST_F(RequestTest, RejectsTooManySegments) {
    EXPECT_EQ(
        error_of(chain({header(kDiscard), segments({{0, 1, 0}, {2, 1, 0}, {4, 1, 0}})}, {status})),
        blk_error::kTooManySegments);
    EXPECT_EQ(error_of(chain({header(kWriteZeroes), segments({{0, 1, 0}, {2, 1, 0}})}, {status})),
              blk_error::kTooManySegments);
}

TEST_F(RequestTest, TakesNoMoreSegmentsThanARequestHolds) {
    disk.max_discard_segments = 1000;  // more than any device offers
    auto list = buffer(16 * (kMaxSegments + 1));
    for (uint32_t i = 0; i <= kMaxSegments; ++i) {
        const Seg one{2 * i, 1, 0};
        std::memcpy(list.data() + 16 * i, &one, 16);
    }
    EXPECT_EQ(error_of(chain({header(kDiscard), list}, {status})), blk_error::kTooManySegments);
    const auto most = parsed(chain({header(kDiscard), list.first(16 * kMaxSegments)}, {status}));
    EXPECT_EQ(most.ranges.size(), kMaxSegments);
}

TEST_F(RequestTest, RejectsSegmentsThatAreTooLarge) {
    EXPECT_EQ(error_of(chain({header(kDiscard), segments({{0, 65, 0}})}, {status})),
              blk_error::kSegmentTooLarge);
    EXPECT_EQ(error_of(chain({header(kWriteZeroes), segments({{0, 33, 0}})}, {status})),
              blk_error::kSegmentTooLarge);
}

TEST_F(RequestTest, RejectsUnknownFlagsAndUnmapOnDiscardWithUnsupp) {
    EXPECT_EQ(error_of(chain({header(kDiscard), segments({{0, 1, kUnmap}})}, {status})),
              blk_error::kUnsupportedFlags);
    EXPECT_EQ(error_of(chain({header(kWriteZeroes), segments({{0, 1, 2}})}, {status})),
              blk_error::kUnsupportedFlags);
    EXPECT_EQ(blk_error::kUnsupportedFlags.status, Status::Unsupported);
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
