#include "devices/virtio/blk/io.h"

#include <gtest/gtest.h>

#include <vector>

namespace mvmm::devices::virtio::blk {
namespace {

using block::IoOp;
using Kind = IoOp::Kind;

// The kinds of every operation `request` runs, in order.
std::vector<Kind> kinds(const Request& request, bool write_through) {
    std::vector<Kind> out;
    for (size_t i = 0; auto op = operation(request, i, write_through); ++i) out.push_back(op->kind);
    return out;
}

// --- operation(): the image operations of a parsed request, in order ---

TEST(BlkOperationTest, TransfersAreOneOperationAtTheirOffset) {
    std::vector<uint8_t> bytes(1024);
    const GuestBuffers::Part part[] = {GuestSlice(std::span(bytes))};
    const Request read{.type = RequestType::In, .offset = 2048, .data = GuestBuffers(part)};
    const auto op = operation(read, 0, false);
    ASSERT_TRUE(op);
    EXPECT_EQ(op->kind, Kind::Read);
    EXPECT_EQ(op->offset, 2048u);
    EXPECT_EQ(op->buffers.size(), 1024u);
    EXPECT_FALSE(operation(read, 1, false));
    EXPECT_EQ(kinds(read, true), std::vector{Kind::Read}) << "a read changes nothing to flush";
}

TEST(BlkOperationTest, WriteThroughFlushesAfterWhatChangesTheDisk) {
    const Request write{.type = RequestType::Out, .offset = 0};
    EXPECT_EQ(kinds(write, false), std::vector{Kind::Write});
    EXPECT_EQ(kinds(write, true), (std::vector{Kind::Write, Kind::Flush}));
    const Request flush{.type = RequestType::Flush};
    EXPECT_EQ(kinds(flush, true), std::vector{Kind::Flush}) << "one flush, not two";
}

TEST(BlkOperationTest, EachRangeIsAnOperationOfItsOwn) {
    const Request zeroes{
        .type = RequestType::WriteZeroes,
        .ranges = {{.offset = 0, .length = 512}, {.offset = 4096, .length = 1024, .unmap = true}}};
    EXPECT_EQ(kinds(zeroes, true),
              (std::vector{Kind::WriteZeroes, Kind::WriteZeroes, Kind::Flush}));
    const auto second = operation(zeroes, 1, false);
    ASSERT_TRUE(second);
    EXPECT_EQ(second->offset, 4096u);
    EXPECT_EQ(second->length, 1024u);
    EXPECT_TRUE(second->may_unmap);

    const Request discard{.type = RequestType::Discard,
                          .ranges = {{.offset = 16384, .length = 4096}}};
    EXPECT_EQ(kinds(discard, false), std::vector{Kind::Discard});
}

TEST(BlkOperationTest, GetIdTouchesNoImage) {
    EXPECT_TRUE(kinds(Request{.type = RequestType::GetId}, true).empty());
}

}  // namespace
}  // namespace mvmm::devices::virtio::blk
