// virtio-scsi command requests as the driver frames them (virtio 1.2, 5.6.6.1): a
// virtio_scsi_cmd_req header with `cdb_size` bytes of CDB, then data-out; a
// virtio_scsi_cmd_resp with `sense_size` bytes of sense, then data-in.  Parsed from a checked
// chain into a CommandRequest before the target sees it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "base/result.h"
#include "devices/virtio/queue.h"
#include "devices/virtio/scsi/sense.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::virtio::scsi {

// The two config fields the driver may set before DRIVER_OK (Linux writes 32 and 96).
struct Layout {
    uint32_t cdb_size = 32;
    uint32_t sense_size = 96;
};

struct CommandRequest {
    std::array<uint8_t, 8> lun{};
    uint64_t tag = 0;  // the driver's name for the task (Linux: its command's address)
    std::array<uint8_t, 32> cdb_bytes{};  // a CDB is at most 16 bytes: 32 keeps any we know
    size_t cdb_length = 0;
    GuestBuffers data_out;
    GuestBuffers response;  // the response header and sense
    GuestBuffers data_in;

    std::span<const uint8_t> cdb() const { return std::span(cdb_bytes).first(cdb_length); }
};

enum class FramingError {
    HeaderTooShort,     // fewer readable bytes than the request header with its CDB
    NoRoomForResponse,  // fewer writable bytes than the response header with its sense
    Bidirectional,      // data-out and data-in, without VIRTIO_SCSI_F_INOUT
};
std::string_view to_string(FramingError error);

Result<CommandRequest, FramingError> parse_command(const DescriptorChain& chain,
                                                   const Layout& layout);

// The target and LUN the 8-byte LUN field addresses (virtio 1.2, 5.6.6.1: byte 0 is 1, byte 1
// the target, bytes 2-3 the LUN); nullopt for an addressing this device does not have, which
// is answered VIRTIO_SCSI_S_BAD_TARGET, as is a target the controller does not have.
struct LunAddress {
    uint8_t target = 0;
    uint16_t lun = 0;
    bool operator==(const LunAddress&) const = default;
};
std::optional<LunAddress> lun_address(std::span<const uint8_t, 8> lun);

// The response to one command; `response` is a VIRTIO_SCSI_S_* code.
struct CommandResponse {
    uint8_t response = 0;
    std::optional<Sense> sense;  // CHECK CONDITION, with autosense
    uint32_t residual = 0;
};

// Writes the response header and sense (what fits in `sense_size`) into `request.response`;
// returns the used length, counting `data_in_written`.
uint32_t write_response(const CommandRequest& request, const Layout& layout,
                        const CommandResponse& response, uint64_t data_in_written);

// A chain whose request cannot be parsed: VIRTIO_SCSI_S_FAILURE when there is room to say
// so.  Returns the used length.
uint32_t write_failure(const DescriptorChain& chain);

}  // namespace mvmm::devices::virtio::scsi
