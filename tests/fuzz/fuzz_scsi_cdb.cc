// fuzz_scsi_cdb: a guest's CDB through the real parse_cdb(), and a data-out buffer through
// parse_unmap_list(), for a LUN of any size.  Whatever parses must stay inside the LUN, never
// write a read-only one, and move exactly its blocks; every other answer is sense data.
//
// Input (little endian): u64 LUN blocks, u8 flags (1: read-only, 2: 4096-byte blocks), u8 n,
// n bytes of CDB, then the UNMAP parameter list.
#include <cstddef>
#include <cstdint>
#include <variant>
#include <vector>

#include "devices/virtio/scsi/cdb.h"
#include "devices/virtio/scsi/unmap_list.h"
#include "fuzz_support.h"

namespace {

using namespace mvmm::devices::virtio::scsi;

// [lba, lba + blocks) on the LUN, computed without wrap-around.
void check_in_range(uint64_t lba, uint64_t blocks, const LunInfo& lun) {
    if (static_cast<unsigned __int128>(lba) + blocks > lun.blocks) __builtin_trap();
}

void check_transfer(uint64_t lba, uint32_t blocks, const Command& command, const LunInfo& lun) {
    check_in_range(lba, blocks, lun);
    if (command.transfer_bytes != uint64_t{blocks} * lun.block_size) __builtin_trap();
}

void check_command(const Command& command, const LunInfo& lun) {
    const auto& op = command.operation;
    const bool writes = std::holds_alternative<Write>(op) ||
                        std::holds_alternative<WriteSame>(op) || std::holds_alternative<Unmap>(op);
    if (writes && lun.read_only) __builtin_trap();
    if (const auto* read = std::get_if<Read>(&op))
        check_transfer(read->lba, read->blocks, command, lun);
    if (const auto* write = std::get_if<Write>(&op))
        check_transfer(write->lba, write->blocks, command, lun);
    if (const auto* verify = std::get_if<Verify>(&op)) {
        check_in_range(verify->lba, verify->blocks, lun);
        if (command.transfer_bytes !=
            (verify->compare ? uint64_t{verify->blocks} * lun.block_size : 0))
            __builtin_trap();
    }
    if (const auto* same = std::get_if<WriteSame>(&op)) {
        check_in_range(same->lba, same->blocks, lun);
        if (same->blocks == 0 || same->blocks > kMaxWriteSameBlocks) __builtin_trap();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    mvmm::fuzz::ByteReader in({data, size});
    LunInfo lun;
    lun.blocks = in.take<uint64_t>();
    const auto flags = in.take<uint8_t>();
    lun.read_only = flags & 1;
    lun.block_size = (flags & 2) ? 4096 : 512;
    const auto cdb = in.take_bytes(in.take<uint8_t>());
    const auto rest = in.rest();
    std::vector<uint8_t> parameter_list(rest.begin(), rest.end());  // as a data-out buffer
    const mvmm::GuestBuffers::Part data_out{std::span(parameter_list)};

    if (const auto command = parse_cdb(cdb, lun)) check_command(*command, lun);
    if (const auto ranges = parse_unmap_list(mvmm::GuestBuffers(std::span(&data_out, 1)), lun)) {
        uint64_t total = 0;
        for (const auto& range : *ranges) {
            check_in_range(range.lba, range.blocks, lun);
            total += range.blocks;
        }
        if (ranges->size() > kMaxUnmapDescriptors || total > kMaxUnmapBlocks) __builtin_trap();
    }
    return 0;
}
