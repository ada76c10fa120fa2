#include "devices/virtio/blk/request.h"

#include <linux/virtio_blk.h>

#include <algorithm>
#include <array>
#include <limits>

namespace mvmm::devices::virtio::blk {

static_assert(uint32_t(RequestType::In) == VIRTIO_BLK_T_IN &&
              uint32_t(RequestType::Out) == VIRTIO_BLK_T_OUT &&
              uint32_t(RequestType::Flush) == VIRTIO_BLK_T_FLUSH &&
              uint32_t(RequestType::GetId) == VIRTIO_BLK_T_GET_ID &&
              uint32_t(RequestType::Discard) == VIRTIO_BLK_T_DISCARD &&
              uint32_t(RequestType::WriteZeroes) == VIRTIO_BLK_T_WRITE_ZEROES);
static_assert(kIdBytes == VIRTIO_BLK_ID_BYTES);
static_assert(uint8_t(Status::Ok) == VIRTIO_BLK_S_OK &&
              uint8_t(Status::IoError) == VIRTIO_BLK_S_IOERR &&
              uint8_t(Status::Unsupported) == VIRTIO_BLK_S_UNSUPP);

namespace {

using Header = virtio_blk_outhdr;  // its ioprio is ignored
static_assert(sizeof(Header) == kHeaderSize);
using Segment = virtio_blk_discard_write_zeroes;
static_assert(sizeof(Segment) == kSegmentSize);
constexpr uint32_t kSegmentUnmap = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;

bool in_disk(uint64_t sector, uint64_t count, const DiskInfo& disk) {
    return sector <= disk.capacity_sectors && count <= disk.capacity_sectors - sector;
}

// A read or write of `data` at `sector`.
Result<Ok, BlkError> check_transfer(const GuestBuffers& data, uint64_t sector,
                                    const DiskInfo& disk) {
    if (data.empty()) return Unexpected{blk_error::kNoData};
    if (data.size() % kSectorSize != 0) return Unexpected{blk_error::kUnalignedLength};
    if (!in_disk(sector, data.size() / kSectorSize, disk))
        return Unexpected{blk_error::kOutOfRange};
    return Ok{};
}

Result<DiskRanges, BlkError> parse_segments(RequestType type, const GuestBuffers& data,
                                            const DiskInfo& disk) {
    const bool discard = type == RequestType::Discard;
    const uint32_t max_segments = std::min(
        discard ? disk.max_discard_segments : disk.max_write_zeroes_segments, kMaxSegments);
    const uint32_t max_sectors = discard ? disk.max_discard_sectors : disk.max_write_zeroes_sectors;
    if (data.empty()) return Unexpected{blk_error::kNoData};
    if (data.size() % kSegmentSize != 0) return Unexpected{blk_error::kUnalignedLength};
    if (data.size() / kSegmentSize > max_segments) return Unexpected{blk_error::kTooManySegments};

    // Parse a private copy: the guest can change its buffers while we look.
    std::array<Segment, kMaxSegments> copy;
    const auto segments = std::span(copy).first(data.size() / kSegmentSize);
    data.copy_to(0, std::span(reinterpret_cast<uint8_t*>(segments.data()), data.size()));
    DiskRanges ranges;
    for (const Segment& s : segments) {
        if ((s.flags & ~kSegmentUnmap) != 0 || (discard && (s.flags & kSegmentUnmap)))
            return Unexpected{blk_error::kUnsupportedFlags};
        if (s.num_sectors > max_sectors) return Unexpected{blk_error::kSegmentTooLarge};
        if (!in_disk(s.sector, s.num_sectors, disk)) return Unexpected{blk_error::kOutOfRange};
        if (s.num_sectors == 0) continue;
        ranges.push_back(DiskRange{.offset = s.sector * kSectorSize,
                                   .length = s.num_sectors * kSectorSize,
                                   .unmap = (s.flags & kSegmentUnmap) != 0});
    }
    return ranges;
}

}  // namespace

Result<Request, BlkError> parse(const DescriptorChain& chain, const DiskInfo& disk) {
    if (chain.writable.empty()) return Unexpected{blk_error::kNoStatusByte};
    if (chain.readable.size() < kHeaderSize) return Unexpected{blk_error::kHeaderTooShort};
    Header header;
    chain.readable.copy_to(0, std::span(reinterpret_cast<uint8_t*>(&header), sizeof header));
    const auto all = std::numeric_limits<uint64_t>::max();
    const GuestBuffers readable_data = chain.readable.slice(kHeaderSize, all);
    const GuestBuffers writable_data = chain.writable.slice(0, chain.writable.size() - 1);

    Request request;
    request.type = RequestType(header.type);
    switch (request.type) {
        case RequestType::In:
        case RequestType::Out: {
            const bool read = request.type == RequestType::In;
            if (!read && disk.read_only) return Unexpected{blk_error::kReadOnly};
            if (!(read ? readable_data : writable_data).empty())
                return Unexpected{blk_error::kWrongDirection};
            request.data = read ? writable_data : readable_data;
            if (auto ok = check_transfer(request.data, header.sector, disk); !ok)
                return Unexpected{ok.error()};
            request.offset = header.sector * kSectorSize;
            return request;
        }
        case RequestType::Flush:
            if (!readable_data.empty() || !writable_data.empty())
                return Unexpected{blk_error::kUnexpectedData};
            return request;
        case RequestType::GetId:
            if (!readable_data.empty()) return Unexpected{blk_error::kWrongDirection};
            if (writable_data.size() < kIdBytes) return Unexpected{blk_error::kIdBufferTooShort};
            request.data = writable_data.slice(0, kIdBytes);
            return request;
        case RequestType::Discard:
        case RequestType::WriteZeroes: {
            if (disk.read_only) return Unexpected{blk_error::kReadOnly};
            if (!writable_data.empty()) return Unexpected{blk_error::kWrongDirection};
            auto ranges = parse_segments(request.type, readable_data, disk);
            if (!ranges) return Unexpected{ranges.error()};
            request.ranges = std::move(ranges).value();
            return request;
        }
    }
    return Unexpected{blk_error::kUnsupportedType};
}

}  // namespace mvmm::devices::virtio::blk
