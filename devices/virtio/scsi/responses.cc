#include "devices/virtio/scsi/responses.h"

#include <algorithm>

#include "devices/virtio/scsi/big_endian.h"

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint8_t kDirectAccess = 0x00;
constexpr uint8_t kNoDeviceHere = 0x7f;  // peripheral qualifier 011b, device type 1Fh
constexpr uint8_t kSpc3 = 0x05;          // the version field: Linux sends REPORT LUNS to SPC-3
constexpr std::string_view kVendor = "MVMM    ";           // 8 bytes
constexpr std::string_view kProduct = "VIRTUAL DISK    ";  // 16 bytes
constexpr std::string_view kRevision = "0001";             // 4 bytes

// Writes `text` at `at`.
void put(std::vector<uint8_t>& bytes, size_t at, std::string_view text) {
    std::ranges::copy(text, bytes.begin() + static_cast<ptrdiff_t>(at));
}

// Appends `tail` (resize and copy: GCC 12 warns falsely about insert() here).
void append(std::vector<uint8_t>& bytes, std::span<const uint8_t> tail) {
    const size_t at = bytes.size();
    bytes.resize(at + tail.size());
    std::ranges::copy(tail, bytes.begin() + static_cast<ptrdiff_t>(at));
}

// A VPD page: byte 0 the device type, byte 1 the page, bytes 2-3 the length of `body`.
std::vector<uint8_t> vpd(uint8_t page, const std::vector<uint8_t>& body) {
    std::vector<uint8_t> bytes(4, 0);
    bytes[0] = kDirectAccess;
    bytes[1] = page;
    store_be(bytes, 2, body.size(), 2);
    append(bytes, body);
    return bytes;
}

std::vector<uint8_t> supported_pages() {
    return vpd(0x00, std::vector<uint8_t>(std::begin(kVpdPages), std::end(kVpdPages)));
}

std::vector<uint8_t> unit_serial_number(const LunIdentity& identity) {
    return vpd(0x80, std::vector<uint8_t>(identity.serial.begin(), identity.serial.end()));
}

// Two logical-unit designators: NAA (what Linux's wwid and by-id names prefer) and a T10
// vendor ID one with the serial.
std::vector<uint8_t> device_identification(const LunIdentity& identity) {
    std::vector<uint8_t> body{0x01, 0x03, 0x00, 8};  // binary, LU, NAA, 8 bytes
    body.resize(12);
    store_be(body, 4, identity.naa, 8);
    const std::string t10 = std::string(kVendor) + identity.serial;
    const uint8_t header[] = {0x02, 0x01, 0x00, static_cast<uint8_t>(t10.size())};
    append(body, header);  // ASCII, LU, T10 vendor ID
    append(body, std::span(reinterpret_cast<const uint8_t*>(t10.data()), t10.size()));
    return vpd(0x83, body);
}

std::vector<uint8_t> block_limits(const LunInfo& lun) {
    std::vector<uint8_t> body(0x3c, 0);
    body[0] = 0x01;  // WSNZ: WRITE SAME needs a block count
    if (!lun.read_only) {
        store_be(body, 16, kMaxUnmapBlocks, 4);
        store_be(body, 20, kMaxUnmapDescriptors, 4);
        store_be(body, 24, kUnmapGranularityBlocks, 4);
        store_be(body, 32, kMaxWriteSameBlocks, 8);
    }
    return vpd(0xb0, body);
}

std::vector<uint8_t> block_device_characteristics() {
    std::vector<uint8_t> body(0x3c, 0);
    body[1] = 0x01;  // medium rotation rate 1: not rotating
    return vpd(0xb1, body);
}

std::vector<uint8_t> logical_block_provisioning(const LunInfo& lun) {
    // LBPU and LBPWS: UNMAP, and WRITE SAME(16) with UNMAP; thin provisioned.  LBPRZ stays 0:
    // where the host cannot punch holes, unmapped blocks keep their data.
    return vpd(0xb2, {0, uint8_t(lun.read_only ? 0 : 0xc0), uint8_t(lun.read_only ? 0 : 2), 0});
}

std::vector<uint8_t> caching_page(PageControl control) {
    std::vector<uint8_t> page(20, 0);
    page[0] = mode_page::kCaching;
    page[1] = 18;
    // WCE: writes are cached until SYNCHRONIZE CACHE, so the guest sends flushes.  Nothing is
    // changeable: there is no MODE SELECT.
    if (control != PageControl::Changeable) page[2] = 0x04;
    return page;
}

std::vector<uint8_t> control_page() {
    std::vector<uint8_t> page(12, 0);  // D_SENSE 0: fixed-format sense
    page[0] = mode_page::kControl;
    page[1] = 10;
    return page;
}

}  // namespace

uint64_t naa_designator(std::string_view serial) {
    uint64_t hash = 0xcbf2'9ce4'8422'2325;  // FNV-1a
    for (char c : serial) hash = (hash ^ static_cast<uint8_t>(c)) * 0x100'0000'01b3;
    return 0x3ull << 60 | (hash & 0x0fff'ffff'ffff'ffff);
}

std::vector<uint8_t> inquiry_data(bool present) {
    std::vector<uint8_t> bytes(36, 0);
    bytes[0] = present ? kDirectAccess : kNoDeviceHere;
    bytes[2] = kSpc3;
    bytes[3] = 0x12;  // HISUP, response data format 2
    bytes[4] = static_cast<uint8_t>(bytes.size() - 5);
    bytes[7] = 0x02;  // CMDQUE: tagged commands, so the guest queues more than one
    put(bytes, 8, kVendor);
    put(bytes, 16, kProduct);
    put(bytes, 32, kRevision);
    return bytes;
}

std::vector<uint8_t> vpd_page(uint8_t page, const LunInfo& lun, const LunIdentity& identity) {
    switch (page) {
        case 0x80:
            return unit_serial_number(identity);
        case 0x83:
            return device_identification(identity);
        case 0xb0:
            return block_limits(lun);
        case 0xb1:
            return block_device_characteristics();
        case 0xb2:
            return logical_block_provisioning(lun);
        default:
            return supported_pages();
    }
}

std::vector<uint8_t> mode_sense_data(const ModeSense& request, const LunInfo& lun) {
    const size_t header = request.ten ? 8 : 4;
    std::vector<uint8_t> bytes(header, 0);
    // Device-specific parameter: WP for a read-only LUN; DPOFUA, FUA writes are honoured.
    bytes[request.ten ? 3 : 2] = (lun.read_only ? 0x80 : 0) | 0x10;
    if (request.block_descriptor) {
        bytes[request.ten ? 7 : 3] = 8;
        bytes.resize(header + 8, 0);
        store_be(bytes, header, std::min<uint64_t>(lun.blocks, 0xffff'ffff), 4);
        store_be(bytes, header + 5, kBlockSize, 3);
    }
    const bool all = request.page == mode_page::kAllPages;
    if (all || request.page == mode_page::kCaching) append(bytes, caching_page(request.control));
    if (all || request.page == mode_page::kControl) append(bytes, control_page());
    // The mode data length counts the bytes after itself.
    store_be(bytes, 0, bytes.size() - (request.ten ? 2 : 1), request.ten ? 2 : 1);
    return bytes;
}

std::vector<uint8_t> read_capacity_data(bool sixteen, const LunInfo& lun) {
    const uint64_t last = lun.blocks == 0 ? 0 : lun.blocks - 1;
    if (!sixteen) {
        std::vector<uint8_t> bytes(8, 0);
        store_be(bytes, 0, std::min<uint64_t>(last, 0xffff'ffff), 4);  // all ones: ask (16)
        store_be(bytes, 4, kBlockSize, 4);
        return bytes;
    }
    std::vector<uint8_t> bytes(32, 0);
    store_be(bytes, 0, last, 8);
    store_be(bytes, 8, kBlockSize, 4);
    if (!lun.read_only) bytes[14] = 0x80;  // LBPME: UNMAP deallocates
    return bytes;
}

std::vector<uint8_t> report_luns_data(std::span<const uint16_t> luns) {
    std::vector<uint8_t> bytes(8 + 8 * luns.size(), 0);
    store_be(bytes, 0, 8 * luns.size(), 4);
    for (size_t i = 0; i < luns.size(); ++i) {
        // Peripheral device addressing below 256, flat space addressing (01b) above.
        const uint16_t lun = luns[i];
        bytes[8 + 8 * i] = lun < 256 ? 0 : static_cast<uint8_t>(0x40 | lun >> 8);
        bytes[9 + 8 * i] = static_cast<uint8_t>(lun);
    }
    return bytes;
}

}  // namespace mvmm::devices::virtio::scsi
