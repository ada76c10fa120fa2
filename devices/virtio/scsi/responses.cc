#include "devices/virtio/scsi/responses.h"

#include <algorithm>
#include <stdexcept>

#include "devices/virtio/scsi/big_endian.h"

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint8_t kDirectAccess = 0x00;
constexpr uint8_t kNoDeviceHere = 0x7f;  // peripheral qualifier 011b, device type 1Fh
constexpr uint8_t kSpc3 = 0x05;          // the version field: Linux sends REPORT LUNS to SPC-3
constexpr std::string_view kVendor = "MVMM    ";           // 8 bytes
constexpr std::string_view kProduct = "VIRTUAL DISK    ";  // 16 bytes
constexpr std::string_view kRevision = "0001";             // 4 bytes

// A VPD page: byte 0 the device type, byte 1 the page, bytes 2-3 the length of the body,
// which the page's builder appends.
Answer vpd(uint8_t page) {
    Answer bytes(4);
    bytes[0] = kDirectAccess;
    bytes[1] = page;
    return bytes;
}
void end_vpd(Answer& page) {
    store_be(page.bytes(), 2, page.size() - 4, 2);
}

Answer supported_pages() {
    Answer page = vpd(0x00);
    page.append(kVpdPages);
    end_vpd(page);
    return page;
}

Answer unit_serial_number(const LunIdentity& identity) {
    Answer page = vpd(0x80);
    page.append(identity.serial);
    end_vpd(page);
    return page;
}

// Two logical-unit designators: NAA (what Linux's wwid and by-id names prefer) and a T10
// vendor ID one with the serial.
Answer device_identification(const LunIdentity& identity) {
    static_assert(4 + 12 + 4 + kVendor.size() + kMaxSerialBytes <= kMaxAnswerBytes);
    Answer page = vpd(0x83);
    page.append(std::array<uint8_t, 4>{0x01, 0x03, 0x00, 8});  // binary, LU, NAA, 8 bytes
    store_be(page.grow(8), 0, identity.naa, 8);
    const auto t10_bytes = static_cast<uint8_t>(kVendor.size() + identity.serial.size());
    page.append(std::array<uint8_t, 4>{0x02, 0x01, 0x00, t10_bytes});  // ASCII, LU, T10
    page.append(kVendor);
    page.append(identity.serial);
    end_vpd(page);
    return page;
}

Answer block_limits(const LunInfo& lun) {
    Answer page = vpd(0xb0);
    const auto body = page.grow(0x3c);
    body[0] = 0x01;  // WSNZ: WRITE SAME needs a block count
    // Optimal transfer length granularity: a physical block.
    store_be(body, 2, 1u << lun.physical_exponent, 2);
    if (!lun.read_only) {
        store_be(body, 16, kMaxUnmapBlocks, 4);
        store_be(body, 20, kMaxUnmapDescriptors, 4);
        store_be(body, 24, std::max<uint32_t>(1, kUnmapGranularityBytes / lun.block_size), 4);
        store_be(body, 32, kMaxWriteSameBlocks, 8);
    }
    end_vpd(page);
    return page;
}

Answer block_device_characteristics() {
    Answer page = vpd(0xb1);
    page.grow(0x3c)[1] = 0x01;  // medium rotation rate 1: not rotating
    end_vpd(page);
    return page;
}

Answer logical_block_provisioning(const LunInfo& lun) {
    // LBPU, LBPWS and LBPWS10: UNMAP, and WRITE SAME(16) and (10) with UNMAP; thin provisioned.
    // LBPRZ stays 0: where the host cannot punch holes, unmapped blocks keep their data.
    Answer page = vpd(0xb2);
    page.append(std::array<uint8_t, 4>{0, uint8_t(lun.read_only ? 0 : 0xe0),
                                       uint8_t(lun.read_only ? 0 : 2), 0});
    end_vpd(page);
    return page;
}

void append_caching_page(Answer& bytes, PageControl control, const LunInfo& lun) {
    const auto page = bytes.grow(20);
    page[0] = mode_page::kCaching;
    page[1] = 18;
    // WCE: writes are cached until SYNCHRONIZE CACHE, so the guest sends flushes.  MODE SELECT
    // may clear it: then every write is stable before it completes.
    constexpr uint8_t kWce = 0x04;
    switch (control) {
        case PageControl::Current:
            page[2] = lun.write_cache ? kWce : 0;
            break;
        case PageControl::Changeable:
        case PageControl::Default:
            page[2] = kWce;
            break;
    }
}

void append_control_page(Answer& bytes) {
    const auto page = bytes.grow(12);  // D_SENSE 0: fixed-format sense; nothing changeable
    page[0] = mode_page::kControl;
    page[1] = 10;
}

}  // namespace

std::span<uint8_t> Answer::grow(size_t n) {
    if (n > bytes_.size() - size_) throw std::length_error("SCSI answer longer than 64 bytes");
    size_ += n;
    return bytes().last(n);
}

void Answer::append(std::span<const uint8_t> tail) {
    std::ranges::copy(tail, grow(tail.size()).begin());
}

void Answer::append(std::string_view text) {
    std::ranges::copy(text, grow(text.size()).begin());
}

uint64_t naa_designator(std::string_view serial) {
    uint64_t hash = 0xcbf2'9ce4'8422'2325;  // FNV-1a
    for (char c : serial) hash = (hash ^ static_cast<uint8_t>(c)) * 0x100'0000'01b3;
    return 0x3ull << 60 | (hash & 0x0fff'ffff'ffff'ffff);
}

Answer inquiry_data(bool present) {
    Answer bytes(8);
    bytes[0] = present ? kDirectAccess : kNoDeviceHere;
    bytes[2] = kSpc3;
    bytes[3] = 0x12;    // HISUP, response data format 2
    bytes[4] = 36 - 5;  // the additional length: what follows this byte
    bytes[7] = 0x02;    // CMDQUE: tagged commands, so the guest queues more than one
    bytes.append(kVendor);
    bytes.append(kProduct);
    bytes.append(kRevision);
    return bytes;
}

Answer vpd_page(uint8_t page, const LunInfo& lun, const LunIdentity& identity) {
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

void append_mode_pages(Answer& bytes, uint8_t page, PageControl control, const LunInfo& lun) {
    const bool all = page == mode_page::kAllPages;
    if (all || page == mode_page::kCaching) append_caching_page(bytes, control, lun);
    if (all || page == mode_page::kControl) append_control_page(bytes);
}

Answer mode_sense_data(const ModeSense& request, const LunInfo& lun) {
    Answer bytes(request.ten ? 8 : 4);
    // Device-specific parameter: WP for a read-only LUN; DPOFUA, FUA writes are honoured.
    bytes[request.ten ? 3 : 2] = (lun.read_only ? 0x80 : 0) | 0x10;
    if (request.block_descriptor) {
        bytes[request.ten ? 7 : 3] = 8;
        const auto descriptor = bytes.grow(8);
        store_be(descriptor, 0, std::min<uint64_t>(lun.blocks, 0xffff'ffff), 4);
        store_be(descriptor, 5, lun.block_size, 3);
    }
    append_mode_pages(bytes, request.page, request.control, lun);
    // The mode data length counts the bytes after itself.
    store_be(bytes.bytes(), 0, bytes.size() - (request.ten ? 2 : 1), request.ten ? 2 : 1);
    return bytes;
}

Answer read_capacity_data(bool sixteen, const LunInfo& lun) {
    const uint64_t last = lun.blocks == 0 ? 0 : lun.blocks - 1;
    if (!sixteen) {
        Answer bytes(8);
        store_be(bytes.bytes(), 0, std::min<uint64_t>(last, 0xffff'ffff), 4);  // all ones: (16)
        store_be(bytes.bytes(), 4, lun.block_size, 4);
        return bytes;
    }
    Answer bytes(32);
    store_be(bytes.bytes(), 0, last, 8);
    store_be(bytes.bytes(), 8, lun.block_size, 4);
    bytes[13] = lun.physical_exponent;     // logical blocks per physical block exponent
    if (!lun.read_only) bytes[14] = 0x80;  // LBPME: UNMAP deallocates
    return bytes;
}

std::span<const uint8_t> all_commands_data() {
    // SPC-4, 6.35.2: a 4-byte length, then 8 bytes a command; built once.
    static const auto kData = [] {
        const auto commands = supported_commands();
        std::array<uint8_t, 4 + 8 * kSupportedCommandCount> data{};
        store_be(data, 0, 8 * commands.size(), 4);
        for (size_t i = 0; i < commands.size(); ++i) {
            const auto descriptor = std::span(data).subspan(4 + 8 * i, 8);
            descriptor[0] = commands[i].opcode;
            if (commands[i].service_action >= 0) {
                store_be(descriptor, 2, static_cast<uint32_t>(commands[i].service_action), 2);
                descriptor[5] = 0x01;  // SERVACTV
            }
            store_be(descriptor, 6, commands[i].length, 2);
        }
        return data;
    }();
    return kData;
}

Result<Answer, Sense> one_command_data(const ReportOpcodes& request) {
    const auto commands = supported_commands();
    const auto command = std::ranges::find_if(
        commands, [&](const CommandUsage& c) { return c.opcode == request.opcode; });
    const bool found = command != commands.end();
    const bool has_actions = found && command->service_action >= 0;
    // Options 1 names a command without service actions, 2 one with them, 3 either.
    if ((request.options == 1 && has_actions) || (request.options == 2 && found && !has_actions))
        return Unexpected{sense::kInvalidFieldInCdb};
    Answer bytes(4);
    if (!found || (has_actions && command->service_action != request.service_action)) {
        bytes[1] = 0x01;  // SUPPORT 001b: not supported
        return bytes;
    }
    bytes[1] = 0x03;  // SUPPORT 011b: supported as the standard says
    store_be(bytes.bytes(), 2, command->length, 2);
    bytes.append(std::span(command->usage).first(command->length));
    bytes[4] = command->opcode;  // the usage data starts with the operation code itself
    return bytes;
}

std::vector<uint8_t> report_luns_data(std::span<const uint16_t> luns) {
    std::vector<uint8_t> bytes(8 + 8 * luns.size(), 0);
    store_be(bytes, 0, 8 * luns.size(), 4);
    for (size_t i = 0; i < luns.size(); ++i) {
        const auto lun = single_level_lun(luns[i]);
        bytes[8 + 8 * i] = lun[0];
        bytes[9 + 8 * i] = lun[1];
    }
    return bytes;
}

std::array<uint8_t, 2> single_level_lun(uint16_t lun) {
    return {lun < 256 ? uint8_t{0} : static_cast<uint8_t>(0x40 | lun >> 8),
            static_cast<uint8_t>(lun)};
}

}  // namespace mvmm::devices::virtio::scsi
