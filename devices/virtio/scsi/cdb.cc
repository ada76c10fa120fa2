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

Parsed transfer(bool write, uint64_t lba, uint32_t blocks, bool fua, const LunInfo& lun) {
    if (!lun.holds(lba, blocks)) return fail(sense::kLbaOutOfRange);
    const uint64_t bytes = uint64_t{blocks} * lun.block_size;
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
    if (!lun.holds(lba, load_be(cdb, length_at, length_bytes))) return fail(sense::kLbaOutOfRange);
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
    // SBC-3, 5.28: a parameter list length of 0 is no error; nothing is unmapped.
    if (length > 0 && length < 8) return fail(sense::kParameterListLength);
    return Command{Unmap{}, length ? Direction::Out : Direction::None, length};
}

// WRITE SAME(10/16): the LBA at byte 2, the length at `length_at`; NDOB only in (16).
Parsed write_same(Cdb cdb, const LunInfo& lun, size_t lba_bytes, size_t length_at,
                  size_t length_bytes) {
    const uint8_t flags = cdb[1];
    const uint8_t ndob = cdb[0] == 0x93 ? 0x01 : 0x00;
    if (flags & (kProtectBits | 0x10 | (0x07 & ~ndob))) return fail(sense::kInvalidFieldInCdb);
    const WriteSame request{load_be(cdb, 2, lba_bytes),
                            static_cast<uint32_t>(load_be(cdb, length_at, length_bytes)),
                            bool(flags & 0x08), bool(flags & ndob)};
    // Zero blocks would mean "to the end": the Block Limits page sets WSNZ, so it is refused.
    if (request.blocks == 0 || request.blocks > kMaxWriteSameBlocks)
        return fail(sense::kInvalidFieldInCdb);
    if (!lun.holds(request.lba, request.blocks)) return fail(sense::kLbaOutOfRange);
    if (lun.read_only) return fail(sense::kWriteProtected);
    if (request.no_data_out) return Command{request};
    return Command{request, Direction::Out, lun.block_size};
}

// VERIFY(10/16): BYTCHK 00b verifies the medium (an image has nothing to check), 01b compares
// the data-out with it; 11b (one block against each) is not supported.
Parsed verify(Cdb cdb, const LunInfo& lun, size_t lba_bytes, size_t length_at,
              size_t length_bytes) {
    const uint8_t byte_check = (cdb[1] >> 1) & 0x03;
    if ((cdb[1] & kProtectBits) || byte_check > 1) return fail(sense::kInvalidFieldInCdb);
    const Verify request{load_be(cdb, 2, lba_bytes),
                         static_cast<uint32_t>(load_be(cdb, length_at, length_bytes)),
                         byte_check == 1};
    if (!lun.holds(request.lba, request.blocks)) return fail(sense::kLbaOutOfRange);
    const uint64_t bytes = request.compare ? uint64_t{request.blocks} * lun.block_size : 0;
    return Command{request, bytes ? Direction::Out : Direction::None, bytes};
}

// MODE SELECT(6/10): PF set (the pages are SPC's), SP clear (nothing is saved), as QEMU wants.
Parsed mode_select(Cdb cdb, bool ten) {
    if ((cdb[1] & 0x11) != 0x10) return fail(sense::kInvalidFieldInCdb);
    const uint64_t length = ten ? load_be(cdb, 7, 2) : cdb[4];
    return Command{ModeSelect{ten}, length ? Direction::Out : Direction::None, length};
}

// REPORT SUPPORTED OPERATION CODES: MAINTENANCE IN, service action 0Ch.  RCTD (timeouts
// descriptors) is refused: this target has no timeouts to report.
Parsed report_opcodes(Cdb cdb, const LunInfo&) {
    if ((cdb[1] & 0x1f) != 0x0c) return fail(sense::kInvalidFieldInCdb);
    const uint8_t options = cdb[2] & 0x07;
    if ((cdb[2] & 0x80) || options > 3) return fail(sense::kInvalidFieldInCdb);
    const ReportOpcodes request{options, cdb[3], static_cast<uint16_t>(load_be(cdb, 4, 2))};
    return Command{request, Direction::In, load_be(cdb, 6, 4)};
}

struct Entry {
    CommandUsage usage;
    Parsed (*parse)(Cdb, const LunInfo&);
};

constexpr int32_t kNoAction = -1;
constexpr uint8_t kAll = 0xff;
// The CDB usage masks say which bits each parser reads; a bit it refuses when set is not used.
constexpr Entry kCommands[] = {
    {{0x00, kNoAction, 6, {kAll}},
     [](Cdb, const LunInfo&) -> Parsed { return Command{TestUnitReady{}}; }},
    {{0x03, kNoAction, 6, {kAll, 0x01, 0, 0, kAll}},
     [](Cdb c, const LunInfo&) -> Parsed {
         return Command{RequestSense{bool(c[1] & 0x01)}, Direction::In, c[4]};
     }},
    {{0x08, kNoAction, 6, {kAll, 0x1f, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write_6(c, l, false); }},
    {{0x0a, kNoAction, 6, {kAll, 0x1f, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write_6(c, l, true); }},
    {{0x12, kNoAction, 6, {kAll, 0x01, kAll, kAll, kAll}}, inquiry},
    {{0x15, kNoAction, 6, {kAll, 0x11, 0, 0, kAll}},
     [](Cdb c, const LunInfo&) { return mode_select(c, false); }},
    {{0x1a, kNoAction, 6, {kAll, 0x08, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo&) { return mode_sense(c, false); }},
    {{0x1b, kNoAction, 6, {kAll}},
     [](Cdb, const LunInfo&) -> Parsed { return Command{StartStopUnit{}}; }},
    {{0x25, kNoAction, 10, {kAll}},
     [](Cdb, const LunInfo&) -> Parsed {
         return Command{ReadCapacity{false}, Direction::In, 8};
     }},
    {{0x28, kNoAction, 10, {kAll, 0x18, kAll, kAll, kAll, kAll, 0, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write(c, l, false, 4, 7, 2); }},
    {{0x2a, kNoAction, 10, {kAll, 0x18, kAll, kAll, kAll, kAll, 0, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write(c, l, true, 4, 7, 2); }},
    {{0x2f, kNoAction, 10, {kAll, 0x12, kAll, kAll, kAll, kAll, 0, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return verify(c, l, 4, 7, 2); }},
    {{0x35, kNoAction, 10, {kAll, 0, kAll, kAll, kAll, kAll, 0, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return synchronize_cache(c, l, 4, 7, 2); }},
    {{0x41, kNoAction, 10, {kAll, 0x08, kAll, kAll, kAll, kAll, 0, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return write_same(c, l, 4, 7, 2); }},
    {{0x42, kNoAction, 10, {kAll, 0, 0, 0, 0, 0, 0, kAll, kAll}}, unmap},
    {{0x55, kNoAction, 10, {kAll, 0x11, 0, 0, 0, 0, 0, kAll, kAll}},
     [](Cdb c, const LunInfo&) { return mode_select(c, true); }},
    {{0x5a, kNoAction, 10, {kAll, 0x08, kAll, kAll, 0, 0, 0, kAll, kAll}},
     [](Cdb c, const LunInfo&) { return mode_sense(c, true); }},
    {{0x88,
      kNoAction,
      16,
      {kAll, 0x18, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write(c, l, false, 8, 10, 4); }},
    {{0x8a,
      kNoAction,
      16,
      {kAll, 0x18, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write(c, l, true, 8, 10, 4); }},
    {{0x8f,
      kNoAction,
      16,
      {kAll, 0x12, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return verify(c, l, 8, 10, 4); }},
    {{0x91,
      kNoAction,
      16,
      {kAll, 0, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return synchronize_cache(c, l, 8, 10, 4); }},
    {{0x93,
      kNoAction,
      16,
      {kAll, 0x09, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return write_same(c, l, 8, 10, 4); }},
    {{0x9e, 0x10, 16, {kAll, 0x1f, 0, 0, 0, 0, 0, 0, 0, 0, kAll, kAll, kAll, kAll}},
     read_capacity_16},
    {{0xa0, kNoAction, 12, {kAll, 0, kAll, 0, 0, 0, kAll, kAll, kAll, kAll}}, report_luns},
    {{0xa3, 0x0c, 12, {kAll, 0x1f, 0x07, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     report_opcodes},
    {{0xa8, kNoAction, 12, {kAll, 0x18, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write(c, l, false, 4, 6, 4); }},
    {{0xaa, kNoAction, 12, {kAll, 0x18, kAll, kAll, kAll, kAll, kAll, kAll, kAll, kAll}},
     [](Cdb c, const LunInfo& l) { return read_write(c, l, true, 4, 6, 4); }},
};

static_assert(std::size(kCommands) == kSupportedCommandCount);
constexpr auto kUsages = [] {
    std::array<CommandUsage, std::size(kCommands)> usages{};
    for (size_t i = 0; i < usages.size(); ++i) usages[i] = kCommands[i].usage;
    return usages;
}();

}  // namespace

Result<Command, Sense> parse_cdb(std::span<const uint8_t> cdb, const LunInfo& lun) {
    if (cdb.empty()) return fail(sense::kInvalidFieldInCdb);
    const auto* entry =
        std::ranges::find_if(kCommands, [&](const Entry& e) { return e.usage.opcode == cdb[0]; });
    if (entry == std::end(kCommands)) return fail(sense::kInvalidOpcode);
    // Only a driver that set cdb_size below the command's length sends a short CDB.
    if (cdb.size() < entry->usage.length) return fail(sense::kInvalidFieldInCdb);
    return entry->parse(cdb.first(entry->usage.length), lun);
}

std::span<const CommandUsage> supported_commands() {
    return kUsages;
}

}  // namespace mvmm::devices::virtio::scsi
