// The data a direct-access target returns for the commands it answers itself (SPC-4, SBC-3):
// INQUIRY (standard data and the VPD pages), MODE SENSE, READ CAPACITY, REPORT LUNS.  All of it
// comes from the LUN's size, read-only flag and identity, never from the image, so a guest that
// scans 60 LUNs costs no disk I/O.  Each function returns the whole answer; the caller cuts it
// to the CDB's allocation length.  The answers a command gets are built in place (an Answer,
// at most 64 bytes): the request path allocates nothing.  REPORT LUNS, up to 128 KiB, is built
// once, when the target is made: its LUNs are fixed.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/virtio/scsi/cdb.h"
#include "devices/virtio/scsi/config.h"

namespace mvmm::devices::virtio::scsi {

// The longest answer built per command: VPD 83h with the longest serial (4 + 12 + 4 + 8 + 36
// bytes) and the Block Limits page (4 + 60).
inline constexpr size_t kMaxAnswerBytes = 64;

// Bytes the target answers itself, built in place.
class Answer {
  public:
    explicit Answer(size_t size = 0) { grow(size); }

    size_t size() const noexcept { return size_; }
    const uint8_t* data() const noexcept { return bytes_.data(); }
    const uint8_t* begin() const noexcept { return bytes_.data(); }
    const uint8_t* end() const noexcept { return bytes_.data() + size_; }
    uint8_t& operator[](size_t at) noexcept { return bytes_[at]; }
    uint8_t operator[](size_t at) const noexcept { return bytes_[at]; }
    std::span<uint8_t> bytes() noexcept { return std::span(bytes_).first(size_); }
    operator std::span<const uint8_t>() const noexcept { return std::span(bytes_).first(size_); }

    // `n` more bytes, zero; throws std::length_error past kMaxAnswerBytes (a bug here).
    std::span<uint8_t> grow(size_t n);
    void append(std::span<const uint8_t> tail);
    void append(std::string_view text);

  private:
    std::array<uint8_t, kMaxAnswerBytes> bytes_{};
    size_t size_ = 0;
};

// Who a LUN says it is: the same serial gives the same names, whatever the LUN's number.
struct LunIdentity {
    std::string serial;  // Unit Serial Number page, and the T10 vendor ID designator; at most
                         // kMaxSerialBytes
    uint64_t naa = 0;    // NAA locally assigned designator (VPD 83h): naa_designator(serial)
};

// NAA 3 (locally assigned) with 60 bits of a hash of `serial`.
uint64_t naa_designator(std::string_view serial);

// Standard INQUIRY data; `present` false answers for a LUN with no device (peripheral
// qualifier 011b, type 1Fh), which a guest scanning the target skips.
Answer inquiry_data(bool present);

// One of kVpdPages.
Answer vpd_page(uint8_t page, const LunInfo& lun, const LunIdentity& identity);

Answer mode_sense_data(const ModeSense& request, const LunInfo& lun);
// The mode pages `page` names (one of mode_page), as MODE SENSE returns them after its header.
void append_mode_pages(Answer& bytes, uint8_t page, PageControl control, const LunInfo& lun);

Answer read_capacity_data(bool sixteen, const LunInfo& lun);

// REPORT SUPPORTED OPERATION CODES: every command (reporting options 0), or the one named.
// Options 1 with a command that has service actions, or 2 with one that has none, are refused
// by the caller (sense::kInvalidFieldInCdb).
std::span<const uint8_t> all_commands_data();
Result<Answer, Sense> one_command_data(const ReportOpcodes& request);

// A LUN number as the first two bytes of an 8-byte LUN: peripheral device addressing below
// 256, flat space addressing (01b) above, as Linux's virtio_scsi expects.
std::array<uint8_t, 2> single_level_lun(uint16_t lun);
// `luns` in ascending order: 8 bytes a LUN after an 8-byte header.
std::vector<uint8_t> report_luns_data(std::span<const uint16_t> luns);

}  // namespace mvmm::devices::virtio::scsi
