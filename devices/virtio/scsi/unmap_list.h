// UNMAP's parameter list (SBC-3, 5.28.2): the ranges of logical blocks to deallocate.  Its header
// and the descriptors this target takes (kMaxUnmapDescriptors) are copied out of the data-out
// buffer, then parsed; the ranges live in the result, not on the heap.
#pragma once

#include <boost/container/static_vector.hpp>
#include <cstdint>

#include "base/result.h"
#include "devices/virtio/scsi/cdb.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::virtio::scsi {

// A range of logical blocks to deallocate.
struct BlockRange {
    uint64_t lba = 0;
    uint32_t blocks = 0;
    bool operator==(const BlockRange&) const = default;
};

using UnmapRanges = boost::container::static_vector<BlockRange, kMaxUnmapDescriptors>;
Result<UnmapRanges, Sense> parse_unmap_list(const GuestBuffers& list, const LunInfo& lun);

}  // namespace mvmm::devices::virtio::scsi
