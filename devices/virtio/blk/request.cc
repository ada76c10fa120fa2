#include "devices/virtio/blk/request.h"

#include <algorithm>
#include <array>
#include <limits>

namespace mvmm::devices::virtio::blk {
namespace {

struct Header {
    uint32_t type;
    uint32_t reserved;  // was ioprio; ignored
    uint64_t sector;
};
static_assert(sizeof(Header) == kHeaderSize);

struct Segment {
    uint64_t sector;
    uint32_t num_sectors;
    uint32_t flags;
};
static_assert(sizeof(Segment) == kSegmentSize);
constexpr uint32_t kSegmentUnmap = 1;

bool in_disk(uint64_t sector, uint64_t count, const DiskInfo& disk) {
    return sector <= disk.capacity_sectors && count <= disk.capacity_sectors - sector;
}

// A read or write of `data` at `sector`.
Result<Ok, BlkError> check_transfer(const GuestBuffers& data, uint64_t sector,
                                    const DiskInfo& disk) {
    if (data.empty()) return Unexpected{BlkError::NoData};
    if (data.size() % kSectorSize != 0) return Unexpected{BlkError::UnalignedLength};
    if (!in_disk(sector, data.size() / kSectorSize, disk)) return Unexpected{BlkError::OutOfRange};
    return Ok{};
}

Result<DiskRanges, BlkError> parse_segments(RequestType type, const GuestBuffers& data,
                                            const DiskInfo& disk) {
    const bool discard = type == RequestType::Discard;
    const uint32_t max_segments = std::min(
        discard ? disk.max_discard_segments : disk.max_write_zeroes_segments, kMaxSegments);
    const uint32_t max_sectors = discard ? disk.max_discard_sectors : disk.max_write_zeroes_sectors;
    if (data.empty()) return Unexpected{BlkError::NoData};
    if (data.size() % kSegmentSize != 0) return Unexpected{BlkError::UnalignedLength};
    if (data.size() / kSegmentSize > max_segments) return Unexpected{BlkError::TooManySegments};

    // Parse a private copy: the guest can change its buffers while we look.
    std::array<Segment, kMaxSegments> copy;
    const auto segments = std::span(copy).first(data.size() / kSegmentSize);
    data.copy_to(0, std::span(reinterpret_cast<uint8_t*>(segments.data()), data.size()));
    DiskRanges ranges;
    for (const Segment& s : segments) {
        if ((s.flags & ~kSegmentUnmap) != 0 || (discard && (s.flags & kSegmentUnmap)))
            return Unexpected{BlkError::UnsupportedFlags};
        if (s.num_sectors > max_sectors) return Unexpected{BlkError::SegmentTooLarge};
        if (!in_disk(s.sector, s.num_sectors, disk)) return Unexpected{BlkError::OutOfRange};
        if (s.num_sectors == 0) continue;
        ranges.push_back(DiskRange{.offset = s.sector * kSectorSize,
                                   .length = s.num_sectors * kSectorSize,
                                   .unmap = (s.flags & kSegmentUnmap) != 0});
    }
    return ranges;
}

}  // namespace

std::string_view to_string(BlkError error) {
    switch (error) {
        case BlkError::NoStatusByte:
            return "no writable status byte";
        case BlkError::HeaderTooShort:
            return "request header shorter than 16 bytes";
        case BlkError::UnsupportedType:
            return "unsupported request type";
        case BlkError::WrongDirection:
            return "data buffers in the wrong direction";
        case BlkError::UnexpectedData:
            return "flush with data";
        case BlkError::NoData:
            return "request without data";
        case BlkError::UnalignedLength:
            return "data length not a multiple of the unit";
        case BlkError::OutOfRange:
            return "request past the end of the disk";
        case BlkError::ReadOnly:
            return "write to a read-only disk";
        case BlkError::IdBufferTooShort:
            return "get-id buffer shorter than 20 bytes";
        case BlkError::TooManySegments:
            return "too many discard/write-zeroes segments";
        case BlkError::SegmentTooLarge:
            return "discard/write-zeroes segment too large";
        case BlkError::UnsupportedFlags:
            return "unsupported discard/write-zeroes flags";
    }
    return "unknown request error";
}

Status status_for(BlkError error) {
    switch (error) {
        case BlkError::UnsupportedType:
        case BlkError::UnsupportedFlags:
            return Status::Unsupported;
        default:
            return Status::IoError;
    }
}

Result<Request, BlkError> parse(const DescriptorChain& chain, const DiskInfo& disk) {
    if (chain.writable.empty()) return Unexpected{BlkError::NoStatusByte};
    if (chain.readable.size() < kHeaderSize) return Unexpected{BlkError::HeaderTooShort};
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
            if (!read && disk.read_only) return Unexpected{BlkError::ReadOnly};
            if (!(read ? readable_data : writable_data).empty())
                return Unexpected{BlkError::WrongDirection};
            request.data = read ? writable_data : readable_data;
            if (auto ok = check_transfer(request.data, header.sector, disk); !ok)
                return Unexpected{ok.error()};
            request.offset = header.sector * kSectorSize;
            return request;
        }
        case RequestType::Flush:
            if (!readable_data.empty() || !writable_data.empty())
                return Unexpected{BlkError::UnexpectedData};
            return request;
        case RequestType::GetId:
            if (!readable_data.empty()) return Unexpected{BlkError::WrongDirection};
            if (writable_data.size() < kIdBytes) return Unexpected{BlkError::IdBufferTooShort};
            request.data = writable_data.slice(0, kIdBytes);
            return request;
        case RequestType::Discard:
        case RequestType::WriteZeroes: {
            if (disk.read_only) return Unexpected{BlkError::ReadOnly};
            if (!writable_data.empty()) return Unexpected{BlkError::WrongDirection};
            auto ranges = parse_segments(request.type, readable_data, disk);
            if (!ranges) return Unexpected{ranges.error()};
            request.ranges = std::move(ranges).value();
            return request;
        }
    }
    return Unexpected{BlkError::UnsupportedType};
}

}  // namespace mvmm::devices::virtio::blk
