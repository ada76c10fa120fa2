// The data a direct-access target returns for the commands it answers itself (SPC-4, SBC-3):
// INQUIRY (standard data and the VPD pages), MODE SENSE, READ CAPACITY, REPORT LUNS.  All of it
// comes from the LUN's size, read-only flag and identity, never from the image, so a guest that
// scans 60 LUNs costs no disk I/O.  Each function returns the whole answer; the caller cuts it
// to the CDB's allocation length.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/virtio/scsi/cdb.h"

namespace mvmm::devices::virtio::scsi {

// Who a LUN says it is: the same serial gives the same names, whatever the LUN's number.
struct LunIdentity {
    std::string serial;  // Unit Serial Number page, and the T10 vendor ID designator
    uint64_t naa = 0;    // NAA locally assigned designator (VPD 83h): naa_designator(serial)
};

// NAA 3 (locally assigned) with 60 bits of a hash of `serial`.
uint64_t naa_designator(std::string_view serial);

// Standard INQUIRY data; `present` false answers for a LUN with no device (peripheral
// qualifier 011b, type 1Fh), which a guest scanning the target skips.
std::vector<uint8_t> inquiry_data(bool present);

// One of kVpdPages.
std::vector<uint8_t> vpd_page(uint8_t page, const LunInfo& lun, const LunIdentity& identity);

std::vector<uint8_t> mode_sense_data(const ModeSense& request, const LunInfo& lun);

std::vector<uint8_t> read_capacity_data(bool sixteen, const LunInfo& lun);

// `luns` in ascending order.
std::vector<uint8_t> report_luns_data(std::span<const uint16_t> luns);

}  // namespace mvmm::devices::virtio::scsi
