#include "devices/virtio/blk/io.h"

#include <algorithm>
#include <array>

namespace mvmm::devices::virtio::blk {

block::IoResult execute(const Request& request, block::DiskImage& disk, std::string_view id, bool write_through) {
    block::IoResult result = Ok{};
    switch (request.type) {
        case RequestType::In:
            return disk.read(request.offset, request.data);
        case RequestType::Out:
            result = disk.write(request.offset, request.data);
            break;
        case RequestType::Flush:
            return disk.flush();
        case RequestType::GetId: {
            std::array<uint8_t, kIdBytes> padded{};
            std::copy_n(id.begin(), std::min<size_t>(id.size(), padded.size()), padded.begin());
            request.data.copy_from(0, padded);
            return Ok{};
        }
        case RequestType::Discard:
        case RequestType::WriteZeroes:
            for (const DiskRange& range : request.ranges) {
                result = request.type == RequestType::Discard
                             ? disk.discard(range.offset, range.length)
                             : disk.write_zeroes(range.offset, range.length, range.unmap);
                if (!result) return result;
            }
            break;
    }
    if (result && write_through) return disk.flush();
    return result;
}

}  // namespace mvmm::devices::virtio::blk
