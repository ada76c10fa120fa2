// MODE SELECT's parameter list (SPC-4, 6.11 and 7.5): what the guest may change.  Only the
// caching page's WCE is changeable (SBC-3, 6.5.5): every other bit of a page sent must equal
// its current value, and a block descriptor must give the LUN's block size.  The list is
// copied off the data-out buffer (at most kMaxModeParameterBytes) and parsed before anything
// changes.
#pragma once

#include <cstddef>
#include <optional>

#include "base/result.h"
#include "devices/virtio/scsi/cdb.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::virtio::scsi {

// A header, a block descriptor, the caching and the control page, with room to spare.
inline constexpr size_t kMaxModeParameterBytes = 128;

struct ModeChanges {
    std::optional<bool> write_cache;  // WCE, when the caching page was sent
};

Result<ModeChanges, Sense> parse_mode_parameters(const GuestBuffers& list, bool ten,
                                                 const LunInfo& lun);

}  // namespace mvmm::devices::virtio::scsi
