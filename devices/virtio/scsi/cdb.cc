#include "devices/virtio/scsi/cdb.h"

#include <algorithm>
#include <array>

#include "devices/virtio/scsi/big_endian.h"

namespace mvmm::devices::virtio::scsi {
namespace {

using Parsed = Result<Command, Sense>;
using Cdb = std::span<const uint8_t>;

constexpr uint8_t kProtectBits = 0xe0;  // RDPROTECT/WRPROTECT: no protection information here
constexpr uint8_t kFuaBit = 0x08;

Unexpected<Sense> fail(const Sense& sense) {
    return Unexpected{sense};
}

// [lba, lba + blocks) lies on the LUN; written so that no sum can wrap.
bool in_range(uint64_t lba, uint64_t blocks, const LunInfo& lun) {
    return lba <= lun.blocks && blocks <= lun.blocks - lba;
}

Parsed transfer(bool write, uint64_t lba, uint32_t blocks, bool fua, const LunInfo& lun) {
    if (!in_range(lba, blocks, lun)) return fail(sense::kLbaOutOfRange);
    const uint64_t bytes = uint64_t{blocks} * kBlockSize;
    if (!write) return Command{Read{lba, blocks}, blocks ? Direction::In : Direction::None, bytes};
    if (lun.read_only) return fail(sense::kWriteProtected);
    return Command{Write{lba, blocks, fua}, blocks ? Direction::Out : Direction::None, bytes};
}

// READ/WRITE(6): a 21-bit LBA, and a length of 0 means 256 blocks.
Parsed read_write_6(Cdb cdb, const LunInfo& lun, bool write) {
    const uint64_t lba = load_be(cdb, 1, 3) & 0x1f'ffff;
    const uint32_t blocks = cdb[4] == 0 ? 256 : cdb[4];
    return transfer(write, lba, blocks, false, lun);
}

// READ/WRITE(10/12/16): the LBA at byte 2, the length at `length_at`.
Parsed read_write(Cdb cdb, const LunInfo& lun, bool write, size_t lba_bytes, size_t length_at,
                  size_t length_bytes) {
    if (cdb[1] & kProtectBits) return fail(sense::kInvalidFieldInCdb);
    const uint64_t lba = load_be(cdb, 2, lba_bytes);
    const auto blocks = static_cast<uint32_t>(load_be(cdb, length_at, length_bytes));
    return transfer(write, lba, blocks, cdb[1] & kFuaBit, lun);
}

Parsed synchronize_cache(Cdb cdb, const LunInfo& lun, size_t lba_bytes, size_t length_at,
                         size_t length_bytes) {
    const uint64_t lba = load_be(cdb, 2, lba_bytes);
    // Zero blocks means "to the end"; the flush covers the whole image either way.
    if (!in_range(lba, load_be(cdb, length_at, length_bytes), lun))
        return fail(sense::kLbaOutOfRange);
    return Command{SynchronizeCache{}};
}

Parsed inquiry(Cdb cdb, const LunInfo&) {
    const bool vpd = cdb[1] & 0x01;
    const uint8_t page = cdb[2];
    if (cdb[1] & 0x02) return fail(sense::kInvalidFieldInCdb);  // CMDDT, obsolete
    if (!vpd && page != 0) return fail(sense::kInvalidFieldInCdb);
    if (vpd && std::ranges::find(kVpdPages, page) == std::end(kVpdPages))
        return fail(sense::kInvalidFieldInCdb);
    return Command{Inquiry{vpd ? std::optional(page) : std::nullopt}, Direction::In,
                   load_be(cdb, 3, 2)};
}

Parsed mode_sense(Cdb cdb, bool ten) {
    const uint8_t control = cdb[2] >> 6;
    const uint8_t page = cdb[2] & 0x3f;
    const uint8_t subpage = cdb[3];
    if (control == 3) return fail(sense::kSavingParametersNotSupported);
    if (page != mode_page::kCaching && page != mode_page::kControl && page != mode_page::kAllPages)
        return fail(sense::kInvalidFieldInCdb);
    if (subpage != 0 && !(page == mode_page::kAllPages && subpage == 0xff))
        return fail(sense::kInvalidFieldInCdb);
    const ModeSense request{page, PageControl{control}, !(cdb[1] & 0x08), ten};
    return Command{request, Direction::In, ten ? load_be(cdb, 7, 2) : cdb[4]};
}

Parsed read_capacity_16(Cdb cdb, const LunInfo&) {
    if ((cdb[1] & 0x1f) != 0x10) return fail(sense::kInvalidFieldInCdb);  // another action
    return Command{ReadCapacity{true}, Direction::In, load_be(cdb, 10, 4)};
}

Parsed report_luns(Cdb cdb, const LunInfo&) {
    const uint64_t allocation = load_be(cdb, 6, 4);
    const uint8_t select = cdb[2];
    if (allocation < 16 || (select != 0 && select != 1 && select != 2))
        return fail(sense::kInvalidFieldInCdb);
    return Command{ReportLuns{select == 1}, Direction::In, allocation};
}

Parsed unmap(Cdb cdb, const LunInfo& lun) {
    if (cdb[1] & 0x01) return fail(sense::kInvalidFieldInCdb);  // ANCHOR
    const uint64_t length = load_be(cdb, 7, 2);
    if (lun.read_only) return fail(sense::kWriteProtected);
    if (length > 0 && length < 8) return fail(sense::kParameterListLength);
    return Command{Unmap{}, length ? Direction::Out : Direction::None, length};
}

Parsed write_same_16(Cdb cdb, const LunInfo& lun) {
    const uint8_t flags = cdb[1];
    if (flags & (kProtectBits | 0x10)) return fail(sense::kInvalidFieldInCdb);  // or ANCHOR
    const WriteSame request{load_be(cdb, 2, 8), static_cast<uint32_t>(load_be(cdb, 10, 4)),
                            bool(flags & 0x08), bool(flags & 0x01)};
    // Zero blocks would mean "to the end": the Block Limits page sets WSNZ, so it is refused.
    if (request.blocks == 0 || request.blocks > kMaxWriteSameBlocks)
        return fail(sense::kInvalidFieldInCdb);
    if (!in_range(request.lba, request.blocks, lun)) return fail(sense::kLbaOutOfRange);
    if (lun.read_only) return fail(sense::kWriteProtected);
    if (request.no_data_out) return Command{request};
    return Command{request, Direction::Out, kBlockSize};
}

struct Entry {
    uint8_t opcode;
    uint8_t length;
    Parsed (*parse)(Cdb, const LunInfo&);
};

constexpr Entry kCommands[] = {
    {0x00, 6, [](Cdb, const LunInfo&) -> Parsed { return Command{TestUnitReady{}}; }},
    {0x03, 6,
     [](Cdb c, const LunInfo&) -> Parsed {
         return Command{RequestSense{bool(c[1] & 0x01)}, Direction::In, c[4]};
     }},
    {0x08, 6, [](Cdb c, const LunInfo& l) { return read_write_6(c, l, false); }},
    {0x0a, 6, [](Cdb c, const LunInfo& l) { return read_write_6(c, l, true); }},
    {0x12, 6, inquiry},
    {0x1a, 6, [](Cdb c, const LunInfo&) { return mode_sense(c, false); }},
    {0x1b, 6, [](Cdb, const LunInfo&) -> Parsed { return Command{StartStopUnit{}}; }},
    {0x25, 10,
     [](Cdb, const LunInfo&) -> Parsed {
         return Command{ReadCapacity{false}, Direction::In, 8};
     }},
    {0x28, 10, [](Cdb c, const LunInfo& l) { return read_write(c, l, false, 4, 7, 2); }},
    {0x2a, 10, [](Cdb c, const LunInfo& l) { return read_write(c, l, true, 4, 7, 2); }},
    {0x35, 10, [](Cdb c, const LunInfo& l) { return synchronize_cache(c, l, 4, 7, 2); }},
    {0x42, 10, unmap},
    {0x5a, 10, [](Cdb c, const LunInfo&) { return mode_sense(c, true); }},
    {0x88, 16, [](Cdb c, const LunInfo& l) { return read_write(c, l, false, 8, 10, 4); }},
    {0x8a, 16, [](Cdb c, const LunInfo& l) { return read_write(c, l, true, 8, 10, 4); }},
    {0x91, 16, [](Cdb c, const LunInfo& l) { return synchronize_cache(c, l, 8, 10, 4); }},
    {0x93, 16, write_same_16},
    {0x9e, 16, read_capacity_16},
    {0xa0, 12, report_luns},
    {0xa8, 12, [](Cdb c, const LunInfo& l) { return read_write(c, l, false, 4, 6, 4); }},
    {0xaa, 12, [](Cdb c, const LunInfo& l) { return read_write(c, l, true, 4, 6, 4); }},
};

}  // namespace

Result<Command, Sense> parse_cdb(std::span<const uint8_t> cdb, const LunInfo& lun) {
    if (cdb.empty()) return fail(sense::kInvalidFieldInCdb);
    const auto* entry =
        std::ranges::find_if(kCommands, [&](const Entry& e) { return e.opcode == cdb[0]; });
    if (entry == std::end(kCommands)) return fail(sense::kInvalidOpcode);
    // Only a driver that set cdb_size below the command's length sends a short CDB.
    if (cdb.size() < entry->length) return fail(sense::kInvalidFieldInCdb);
    return entry->parse(cdb.first(entry->length), lun);
}

Result<UnmapRanges, Sense> parse_unmap_list(const GuestBuffers& list, const LunInfo& lun) {
    constexpr size_t kHeader = 8, kDescriptor = 16;
    std::array<uint8_t, kHeader + kDescriptor * kMaxUnmapDescriptors> copy;
    const auto head = std::span(copy).first(list.copy_to(0, copy));
    if (head.size() < kHeader) return fail(sense::kParameterListLength);
    const uint64_t data_length = load_be(head, 0, 2);         // bytes after this field
    const uint64_t descriptors_length = load_be(head, 2, 2);  // a partial last one is ignored
    if (descriptors_length + kHeader > list.size() || descriptors_length + 6 > data_length)
        return fail(sense::kParameterListLength);
    const uint64_t count = descriptors_length / kDescriptor;
    if (count > kMaxUnmapDescriptors) return fail(sense::kInvalidFieldInParameterList);
    UnmapRanges ranges;
    uint64_t total = 0;                     // at most 32 x 32 bits: no wrap
    for (uint64_t i = 0; i < count; ++i) {  // every one of them is in `head`
        const size_t at = kHeader + i * kDescriptor;
        const BlockRange range{load_be(head, at, 8),
                               static_cast<uint32_t>(load_be(head, at + 8, 4))};
        if (!in_range(range.lba, range.blocks, lun)) return fail(sense::kLbaOutOfRange);
        total += range.blocks;
        if (range.blocks > 0) ranges.push_back(range);
    }
    if (total > kMaxUnmapBlocks) return fail(sense::kInvalidFieldInParameterList);
    return ranges;
}

}  // namespace mvmm::devices::virtio::scsi
