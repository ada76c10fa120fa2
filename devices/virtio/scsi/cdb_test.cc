// parse_cdb() on good and hostile input: every CDB a guest can send is
// either a checked Command or the sense a real target returns.
#include "devices/virtio/scsi/cdb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <random>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr LunInfo kLun{.blocks = 2048, .read_only = false};
constexpr LunInfo kReadOnly{.blocks = 2048, .read_only = true};

std::vector<uint8_t> cdb(std::initializer_list<uint8_t> bytes, size_t length = 0) {
    std::vector<uint8_t> out(bytes);
    if (out.size() < length) out.resize(length);
    return out;
}

// CDBs with big-endian fields.
std::vector<uint8_t> rw10(uint8_t opcode, uint32_t lba, uint16_t blocks, uint8_t flags = 0) {
    return cdb({opcode, flags, uint8_t(lba >> 24), uint8_t(lba >> 16), uint8_t(lba >> 8),
                uint8_t(lba), 0, uint8_t(blocks >> 8), uint8_t(blocks), 0});
}
std::vector<uint8_t> rw16(uint8_t opcode, uint64_t lba, uint32_t blocks, uint8_t flags = 0) {
    std::vector<uint8_t> out(16, 0);
    out[0] = opcode;
    out[1] = flags;
    for (int i = 0; i < 8; ++i) out[2 + i] = uint8_t(lba >> (56 - 8 * i));
    for (int i = 0; i < 4; ++i) out[10 + i] = uint8_t(blocks >> (24 - 8 * i));
    return out;
}
std::vector<uint8_t> rw12(uint8_t opcode, uint32_t lba, uint32_t blocks) {
    std::vector<uint8_t> out(12, 0);
    out[0] = opcode;
    for (int i = 0; i < 4; ++i) out[2 + i] = uint8_t(lba >> (24 - 8 * i));
    for (int i = 0; i < 4; ++i) out[6 + i] = uint8_t(blocks >> (24 - 8 * i));
    return out;
}

Sense sense_of(const std::vector<uint8_t>& bytes, const LunInfo& lun = kLun) {
    auto parsed = parse_cdb(bytes, lun);
    EXPECT_FALSE(parsed) << "accepted opcode " << int(bytes.empty() ? -1 : bytes[0]);
    return parsed ? sense::kNoSense : parsed.error();
}

bool on_lun(uint64_t lba, uint64_t blocks) {
    return lba <= kLun.blocks && blocks <= kLun.blocks - lba;
}

template <class T>
T operation_of(const Command& command) {
    EXPECT_TRUE(std::holds_alternative<T>(command.operation));
    return std::holds_alternative<T>(command.operation) ? std::get<T>(command.operation) : T{};
}

TEST(ParseCdb, ReadsAndWritesOfEverySize) {
    auto read = parse_cdb(rw10(0x28, 100, 8), kLun);
    ASSERT_TRUE(read);
    EXPECT_EQ(read->direction, Direction::In);
    EXPECT_EQ(read->transfer_bytes, 8u * 512);
    EXPECT_EQ(operation_of<Read>(*read).lba, 100u);

    auto write = parse_cdb(rw16(0x8a, 2040, 8, 0x08), kLun);
    ASSERT_TRUE(write);
    EXPECT_EQ(write->direction, Direction::Out);
    EXPECT_TRUE(operation_of<Write>(*write).fua);

    auto read12 = parse_cdb(rw12(0xa8, 7, 3), kLun);
    ASSERT_TRUE(read12);
    EXPECT_EQ(operation_of<Read>(*read12).blocks, 3u);

    auto write6 = parse_cdb(cdb({0x0a, 0x00, 0x01, 0x00, 0x00, 0}), kLun);  // LBA 256, 256 blocks
    ASSERT_TRUE(write6);
    EXPECT_EQ(operation_of<Write>(*write6).lba, 256u);
    EXPECT_EQ(operation_of<Write>(*write6).blocks, 256u) << "a length of 0 is 256 in READ/WRITE(6)";
}

TEST(ParseCdb, ZeroBlocksMoveNothing) {
    auto read = parse_cdb(rw10(0x28, 2048, 0), kLun);
    ASSERT_TRUE(read) << "LBA == capacity with no blocks is no error";
    EXPECT_EQ(read->direction, Direction::None);
    EXPECT_EQ(read->transfer_bytes, 0u);
}

TEST(ParseCdb, RangesPastTheEndAndWrapAroundAreOutOfRange) {
    EXPECT_EQ(sense_of(rw10(0x28, 2041, 8)), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(rw10(0x28, 2049, 0)), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(rw16(0x88, ~0ull, 2)), sense::kLbaOutOfRange) << "LBA + blocks wraps";
    EXPECT_EQ(sense_of(rw16(0x8a, ~0ull - 1, ~0u)), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(rw16(0x88, 0, ~0u)), sense::kLbaOutOfRange) << "a 2 TiB transfer";
    EXPECT_EQ(sense_of(rw12(0xaa, 0xffff'ffff, 0xffff'ffff)), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(cdb({0x08, 0x1f, 0xff, 0xff, 1, 0})), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(rw16(0x91, 4000, 0)), sense::kLbaOutOfRange) << "SYNCHRONIZE CACHE(16)";
    EXPECT_EQ(sense_of(rw10(0x35, 2000, 100)), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(rw16(0x93, ~0ull, 1)), sense::kLbaOutOfRange) << "WRITE SAME(16)";
}

TEST(ParseCdb, WritesToAReadOnlyLunAreWriteProtected) {
    EXPECT_EQ(sense_of(rw10(0x2a, 0, 1), kReadOnly), sense::kWriteProtected);
    EXPECT_EQ(sense_of(cdb({0x0a, 0, 0, 0, 1, 0}), kReadOnly), sense::kWriteProtected);
    EXPECT_EQ(sense_of(rw16(0x93, 0, 1, 0x08), kReadOnly), sense::kWriteProtected);
    EXPECT_EQ(sense_of(cdb({0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}), kReadOnly), sense::kWriteProtected);
    EXPECT_TRUE(parse_cdb(rw10(0x28, 0, 1), kReadOnly)) << "reads are fine";
    EXPECT_TRUE(parse_cdb(rw10(0x35, 0, 0), kReadOnly)) << "and so is a flush";
}

TEST(ParseCdb, ShortCdbsAndUnknownOpcodes) {
    EXPECT_EQ(sense_of({}), sense::kInvalidFieldInCdb);
    EXPECT_EQ(sense_of(cdb({0x28, 0, 0, 0, 0, 0})), sense::kInvalidFieldInCdb) << "6 of 10 bytes";
    EXPECT_EQ(sense_of(std::vector<uint8_t>(15, 0x88)), sense::kInvalidFieldInCdb);
    for (uint8_t opcode : {0x04, 0x1d, 0x3b, 0x7f, 0x89, 0xc0, 0xff})
        EXPECT_EQ(sense_of(cdb({opcode}, 16)), sense::kInvalidOpcode) << int(opcode);
    auto padded = cdb({0x00}, 32);
    EXPECT_TRUE(parse_cdb(padded, kLun)) << "bytes past the command's length are ignored";
}

TEST(ParseCdb, ProtectionInformationIsRefused) {
    EXPECT_EQ(sense_of(rw10(0x28, 0, 1, 0x20)), sense::kInvalidFieldInCdb);
    EXPECT_EQ(sense_of(rw16(0x8a, 0, 1, 0xe0)), sense::kInvalidFieldInCdb);
}

TEST(ParseCdb, Inquiry) {
    auto standard = parse_cdb(cdb({0x12, 0, 0, 0, 96, 0}), kLun);
    ASSERT_TRUE(standard);
    EXPECT_FALSE(operation_of<Inquiry>(*standard).vpd_page);
    EXPECT_EQ(standard->transfer_bytes, 96u);
    for (uint8_t page : kVpdPages) {
        auto vpd = parse_cdb(cdb({0x12, 1, page, 0x01, 0x00, 0}), kLun);
        ASSERT_TRUE(vpd) << int(page);
        EXPECT_EQ(operation_of<Inquiry>(*vpd).vpd_page, page);
        EXPECT_EQ(vpd->transfer_bytes, 256u);
    }
    EXPECT_EQ(sense_of(cdb({0x12, 1, 0x89, 0, 255, 0})), sense::kInvalidFieldInCdb);
    EXPECT_EQ(sense_of(cdb({0x12, 0, 0x80, 0, 255, 0})), sense::kInvalidFieldInCdb) << "no EVPD";
    EXPECT_EQ(sense_of(cdb({0x12, 2, 0, 0, 255, 0})), sense::kInvalidFieldInCdb) << "CMDDT";
}

TEST(ParseCdb, ModeSense) {
    auto six = parse_cdb(cdb({0x1a, 0x08, 0x08, 0, 64, 0}), kLun);
    ASSERT_TRUE(six);
    const auto caching = operation_of<ModeSense>(*six);
    EXPECT_EQ(caching.page, mode_page::kCaching);
    EXPECT_FALSE(caching.block_descriptor);
    EXPECT_FALSE(caching.ten);
    auto ten = parse_cdb(cdb({0x5a, 0, 0x3f | 0x80, 0xff, 0, 0, 0, 0x02, 0x00, 0}), kLun);
    ASSERT_TRUE(ten);
    EXPECT_EQ(operation_of<ModeSense>(*ten).control, PageControl::Default);
    EXPECT_EQ(ten->transfer_bytes, 512u);
    EXPECT_EQ(sense_of(cdb({0x1a, 0, 0xc8, 0, 64, 0})), sense::kSavingParametersNotSupported);
    EXPECT_EQ(sense_of(cdb({0x1a, 0, 0x19, 0, 64, 0})), sense::kInvalidFieldInCdb) << "page 19h";
    EXPECT_EQ(sense_of(cdb({0x1a, 0, 0x08, 1, 64, 0})), sense::kInvalidFieldInCdb) << "subpage";
}

TEST(ParseCdb, CapacityLunsSenseAndHousekeeping) {
    auto rc10 = parse_cdb(cdb({0x25}, 10), kLun);
    ASSERT_TRUE(rc10);
    EXPECT_FALSE(operation_of<ReadCapacity>(*rc10).sixteen);
    auto rc16 = parse_cdb(cdb({0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}), kLun);
    ASSERT_TRUE(rc16);
    EXPECT_TRUE(operation_of<ReadCapacity>(*rc16).sixteen);
    EXPECT_EQ(rc16->transfer_bytes, 32u);
    EXPECT_EQ(sense_of(cdb({0x9e, 0x12}, 16)), sense::kInvalidFieldInCdb) << "GET LBA STATUS";

    auto luns = parse_cdb(cdb({0xa0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0}), kLun);
    ASSERT_TRUE(luns);
    EXPECT_EQ(luns->transfer_bytes, 256u);
    EXPECT_EQ(sense_of(cdb({0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 0, 0})), sense::kInvalidFieldInCdb);
    EXPECT_EQ(sense_of(cdb({0xa0, 0, 0x10, 0, 0, 0, 0, 0, 1, 0, 0, 0})), sense::kInvalidFieldInCdb);

    auto request_sense = parse_cdb(cdb({0x03, 1, 0, 0, 252, 0}), kLun);
    ASSERT_TRUE(request_sense);
    EXPECT_TRUE(operation_of<RequestSense>(*request_sense).descriptor_format);
    EXPECT_TRUE(parse_cdb(cdb({0x00}, 6), kLun));
    EXPECT_TRUE(parse_cdb(cdb({0x1b, 0, 0, 0, 1, 0}), kLun));
}

TEST(ParseCdb, UnmapAndWriteSame) {
    auto unmap = parse_cdb(cdb({0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0}), kLun);
    ASSERT_TRUE(unmap);
    EXPECT_EQ(unmap->direction, Direction::Out);
    EXPECT_EQ(unmap->transfer_bytes, 24u);
    EXPECT_EQ(parse_cdb(cdb({0x42}, 10), kLun)->direction, Direction::None) << "an empty list";
    EXPECT_EQ(sense_of(cdb({0x42, 0, 0, 0, 0, 0, 0, 0, 7, 0})), sense::kParameterListLength);
    EXPECT_EQ(sense_of(cdb({0x42, 1, 0, 0, 0, 0, 0, 0, 24, 0})), sense::kInvalidFieldInCdb);

    auto zeroes = parse_cdb(rw16(0x93, 8, 16, 0x08), kLun);
    ASSERT_TRUE(zeroes);
    EXPECT_TRUE(operation_of<WriteSame>(*zeroes).unmap);
    EXPECT_EQ(zeroes->transfer_bytes, 512u);
    auto no_data = parse_cdb(rw16(0x93, 8, 16, 0x01), kLun);
    ASSERT_TRUE(no_data);
    EXPECT_EQ(no_data->direction, Direction::None);
    EXPECT_EQ(sense_of(rw16(0x93, 0, 0)), sense::kInvalidFieldInCdb) << "WSNZ";
    EXPECT_EQ(sense_of(rw16(0x93, 0, kMaxWriteSameBlocks + 1)), sense::kInvalidFieldInCdb);
    EXPECT_EQ(sense_of(rw16(0x93, 0, 1, 0x10)), sense::kInvalidFieldInCdb) << "ANCHOR";
}

// Any 16 bytes: a Command whose transfer stays on the LUN, or sense; never a crash.
TEST(ParseCdb, UnmapWithNoParameterListMovesNothing) {
    auto unmap = parse_cdb(cdb({0x42, 0, 0, 0, 0, 0, 0, 0, 0, 0}), kLun);
    ASSERT_TRUE(unmap) << "SBC-3: no error";
    EXPECT_EQ(unmap->direction, Direction::None);
    EXPECT_EQ(sense_of(cdb({0x42, 0, 0, 0, 0, 0, 0, 0, 7, 0})), sense::kParameterListLength);
}

TEST(ParseCdb, WriteSameTen) {
    auto same = parse_cdb(rw10(0x41, 100, 8, 0x08), kLun);
    ASSERT_TRUE(same);
    const auto request = operation_of<WriteSame>(*same);
    EXPECT_EQ(request.lba, 100u);
    EXPECT_EQ(request.blocks, 8u);
    EXPECT_TRUE(request.unmap);
    EXPECT_FALSE(request.no_data_out);
    EXPECT_EQ(same->transfer_bytes, 512u);
    EXPECT_EQ(sense_of(rw10(0x41, 100, 8, 0x01)), sense::kInvalidFieldInCdb) << "no NDOB in (10)";
    EXPECT_EQ(sense_of(rw10(0x41, 100, 0)), sense::kInvalidFieldInCdb) << "WSNZ";
    EXPECT_EQ(sense_of(rw10(0x41, 2047, 2)), sense::kLbaOutOfRange);
    EXPECT_EQ(sense_of(rw10(0x41, 0, 1), kReadOnly), sense::kWriteProtected);
    const LunInfo big_blocks{.blocks = 64, .block_size = 4096};
    EXPECT_EQ(parse_cdb(rw10(0x41, 0, 1), big_blocks)->transfer_bytes, 4096u) << "one block";
}

TEST(ParseCdb, Verify) {
    auto medium = parse_cdb(rw10(0x2f, 10, 4), kLun);
    ASSERT_TRUE(medium);
    EXPECT_FALSE(operation_of<Verify>(*medium).compare);
    EXPECT_EQ(medium->direction, Direction::None) << "BYTCHK 0: no data";
    auto compare = parse_cdb(rw16(0x8f, 10, 4, 0x02), kLun);
    ASSERT_TRUE(compare);
    EXPECT_TRUE(operation_of<Verify>(*compare).compare);
    EXPECT_EQ(compare->direction, Direction::Out);
    EXPECT_EQ(compare->transfer_bytes, 4u * 512);
    EXPECT_TRUE(parse_cdb(rw10(0x2f, 0, 1, 0x02), kReadOnly)) << "reads only";
    EXPECT_EQ(sense_of(rw10(0x2f, 0, 1, 0x06)), sense::kInvalidFieldInCdb) << "BYTCHK 11b";
    EXPECT_EQ(sense_of(rw10(0x2f, 0, 1, 0x04)), sense::kInvalidFieldInCdb) << "BYTCHK 10b";
    EXPECT_EQ(sense_of(rw10(0x2f, 0, 1, 0x20)), sense::kInvalidFieldInCdb) << "VRPROTECT";
    EXPECT_EQ(sense_of(rw16(0x8f, ~0ull, 2)), sense::kLbaOutOfRange);
}

TEST(ParseCdb, ModeSelect) {
    auto six = parse_cdb(cdb({0x15, 0x10, 0, 0, 24, 0}), kLun);
    ASSERT_TRUE(six);
    EXPECT_FALSE(operation_of<ModeSelect>(*six).ten);
    EXPECT_EQ(six->direction, Direction::Out);
    EXPECT_EQ(six->transfer_bytes, 24u);
    auto ten = parse_cdb(cdb({0x55, 0x10, 0, 0, 0, 0, 0, 0x01, 0x00, 0}), kLun);
    ASSERT_TRUE(ten);
    EXPECT_TRUE(operation_of<ModeSelect>(*ten).ten);
    EXPECT_EQ(ten->transfer_bytes, 256u);
    EXPECT_EQ(parse_cdb(cdb({0x15, 0x10, 0, 0, 0, 0}), kLun)->direction, Direction::None);
    EXPECT_EQ(sense_of(cdb({0x15, 0x00, 0, 0, 24, 0})), sense::kInvalidFieldInCdb) << "PF 0";
    EXPECT_EQ(sense_of(cdb({0x15, 0x11, 0, 0, 24, 0})), sense::kInvalidFieldInCdb) << "SP 1";
}

TEST(ParseCdb, ReportSupportedOperationCodes) {
    auto all = parse_cdb(cdb({0xa3, 0x0c, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}), kLun);
    ASSERT_TRUE(all);
    EXPECT_EQ(operation_of<ReportOpcodes>(*all).options, 0);
    EXPECT_EQ(all->transfer_bytes, 512u);
    auto one = parse_cdb(cdb({0xa3, 0x0c, 2, 0x9e, 0, 0x10, 0, 0, 0, 64, 0, 0}), kLun);
    ASSERT_TRUE(one);
    EXPECT_EQ(operation_of<ReportOpcodes>(*one).opcode, 0x9e);
    EXPECT_EQ(operation_of<ReportOpcodes>(*one).service_action, 0x10);
    EXPECT_EQ(sense_of(cdb({0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0})), sense::kInvalidFieldInCdb)
        << "REPORT TARGET PORT GROUPS";
    EXPECT_EQ(sense_of(cdb({0xa3, 0x0c, 4, 0, 0, 0, 0, 0, 2, 0, 0, 0})), sense::kInvalidFieldInCdb);
    EXPECT_EQ(sense_of(cdb({0xa3, 0x0c, 0x80, 0, 0, 0, 0, 0, 2, 0, 0, 0})),
              sense::kInvalidFieldInCdb)
        << "RCTD";
}

TEST(SupportedCommands, EveryOneParsesAndItsUsageNamesItsOpcode) {
    for (const CommandUsage& command : supported_commands()) {
        EXPECT_EQ(command.usage[0], 0xff) << int(command.opcode);
        const auto zeroes = parse_cdb(cdb({command.opcode}, command.length), kLun);
        EXPECT_TRUE(zeroes || zeroes.error() != sense::kInvalidOpcode) << int(command.opcode);
        EXPECT_EQ(sense_of(cdb({command.opcode}, command.length - 1)), sense::kInvalidFieldInCdb)
            << int(command.opcode) << ": one byte short";
    }
    EXPECT_TRUE(std::ranges::is_sorted(supported_commands(), {}, &CommandUsage::opcode));
}

TEST(ParseCdb, RandomCdbsNeverEscapeTheLun) {
    std::mt19937_64 random(15);
    for (int i = 0; i < 200000; ++i) {
        std::vector<uint8_t> bytes(1 + random() % 16);
        for (auto& b : bytes) b = static_cast<uint8_t>(random());
        if (i % 2) bytes[0] = std::array<uint8_t, 6>{0x08, 0x28, 0x88, 0x8a, 0x93, 0xaa}[i % 6];
        auto parsed = parse_cdb(bytes, kLun);
        if (!parsed) continue;
        if (auto* read = std::get_if<Read>(&parsed->operation)) {
            EXPECT_TRUE(on_lun(read->lba, read->blocks));
        }
        if (auto* write = std::get_if<Write>(&parsed->operation)) {
            EXPECT_TRUE(on_lun(write->lba, write->blocks));
        }
        if (auto* same = std::get_if<WriteSame>(&parsed->operation)) {
            EXPECT_TRUE(on_lun(same->lba, same->blocks));
        }
    }
}

}  // namespace
}  // namespace mvmm::devices::virtio::scsi
