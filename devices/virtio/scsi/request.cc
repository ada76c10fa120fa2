#include "devices/virtio/scsi/request.h"

#include <linux/virtio_scsi.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint64_t kRequestHeader = offsetof(virtio_scsi_cmd_req, cdb);
constexpr uint64_t kResponseHeader = offsetof(virtio_scsi_cmd_resp, sense);
constexpr uint8_t kCheckCondition = 0x02;

}  // namespace

std::string_view to_string(FramingError error) {
    switch (error) {
        case FramingError::HeaderTooShort:
            return "the request header is shorter than its CDB";
        case FramingError::NoRoomForResponse:
            return "no room for the response header and sense";
        case FramingError::Bidirectional:
            return "data-out and data-in in one request";
    }
    return "unknown framing error";
}

Result<CommandRequest, FramingError> parse_command(const DescriptorChain& chain,
                                                   const Layout& layout) {
    const uint64_t header = kRequestHeader + layout.cdb_size;
    const uint64_t response = kResponseHeader + layout.sense_size;
    if (chain.readable.size() < header) return Unexpected{FramingError::HeaderTooShort};
    if (chain.writable.size() < response) return Unexpected{FramingError::NoRoomForResponse};
    CommandRequest request;
    request.data_out = chain.readable.slice(header, chain.readable.size() - header);
    request.response = chain.writable.slice(0, response);
    request.data_in = chain.writable.slice(response, chain.writable.size() - response);
    if (!request.data_out.empty() && !request.data_in.empty())
        return Unexpected{FramingError::Bidirectional};
    chain.readable.copy_to(offsetof(virtio_scsi_cmd_req, lun), request.lun);
    chain.readable.copy_to(offsetof(virtio_scsi_cmd_req, tag),
                           std::span(reinterpret_cast<uint8_t*>(&request.tag), sizeof request.tag));
    request.cdb_length = std::min<size_t>(layout.cdb_size, request.cdb_bytes.size());
    chain.readable.copy_to(kRequestHeader, std::span(request.cdb_bytes).first(request.cdb_length));
    return request;
}

std::optional<LunAddress> lun_address(std::span<const uint8_t, 8> lun) {
    // Bytes 2-3 peripheral (00b) or flat space (01b) addressing; one level.
    if (lun[0] != 1) return std::nullopt;
    const uint8_t method = lun[2] >> 6;
    if (method > 1 || (method == 0 && lun[2] != 0)) return std::nullopt;
    if (std::any_of(lun.begin() + 4, lun.end(), [](uint8_t b) { return b != 0; }))
        return std::nullopt;
    return LunAddress{lun[1], static_cast<uint16_t>((lun[2] & 0x3f) << 8 | lun[3])};
}

uint32_t write_response(const CommandRequest& request, const Layout& layout,
                        const CommandResponse& response, uint64_t data_in_written) {
    virtio_scsi_cmd_resp header{};  // little-endian fields, like the host
    header.resid = response.residual;
    header.response = response.response;
    size_t sense_bytes = 0;
    if (response.sense) {
        const auto sense = fixed_sense(*response.sense);
        sense_bytes = std::min<size_t>(sense.size(), layout.sense_size);
        std::memcpy(header.sense, sense.data(), sense_bytes);
        header.sense_len = static_cast<uint32_t>(sense_bytes);
        header.status = kCheckCondition;
    }
    request.response.copy_from(
        0, std::span(reinterpret_cast<const uint8_t*>(&header), kResponseHeader + sense_bytes));
    return static_cast<uint32_t>(request.response.size() + data_in_written);
}

uint32_t write_failure(const DescriptorChain& chain) {
    virtio_scsi_cmd_resp header{};
    header.response = VIRTIO_SCSI_S_FAILURE;
    if (chain.writable.size() < kResponseHeader) return 0;
    chain.writable.copy_from(0,
                             std::span(reinterpret_cast<const uint8_t*>(&header), kResponseHeader));
    return kResponseHeader;
}

}  // namespace mvmm::devices::virtio::scsi
