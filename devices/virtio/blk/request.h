// virtio-blk requests (virtio 1.2, 5.2.6) parsed from a checked descriptor chain into a
// checked Request before anything touches the disk, so every guest mistake is a typed error
// and a unit test.
#pragma once

#include <boost/container/static_vector.hpp>
#include <cstdint>
#include <string_view>

#include "base/result.h"
#include "devices/virtio/queue.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::virtio::blk {

inline constexpr uint64_t kSectorSize = 512;
inline constexpr uint64_t kHeaderSize = 16;   // struct virtio_blk_req up to data[]
inline constexpr uint64_t kSegmentSize = 16;  // struct virtio_blk_discard_write_zeroes
inline constexpr uint64_t kIdBytes = 20;      // VIRTIO_BLK_ID_BYTES
// The most discard/write-zeroes segments in one request: the bound on max_discard_seg and
// max_write_zeroes_seg, so a request's ranges live in the request, not on the heap.
inline constexpr uint32_t kMaxSegments = 32;

// VIRTIO_BLK_T_* of <linux/virtio_blk.h>.
enum class RequestType : uint32_t {
    In = 0,
    Out = 1,
    Flush = 4,
    GetId = 8,
    Discard = 11,
    WriteZeroes = 13,
};

// The status byte the device writes last.
enum class Status : uint8_t { Ok = 0, IoError = 1, Unsupported = 2 };

// What parsing needs to know about the disk.
struct DiskInfo {
    uint64_t capacity_sectors = 0;
    bool read_only = false;
    uint32_t max_discard_sectors = 0;   // per segment
    uint32_t max_discard_segments = 0;  // at most kMaxSegments
    uint32_t max_write_zeroes_sectors = 0;
    uint32_t max_write_zeroes_segments = 0;  // at most kMaxSegments
};

// Every guest mistake a request can hold, with the status the device answers and what the log says,
// each written once (scsi/sense.h is the model). UNSUPP for what the device does not do (the spec
// asks for it), IOERR for the rest.
struct BlkError {
    Status status = Status::IoError;
    std::string_view what;
    bool operator==(const BlkError& other) const { return what == other.what; }
};

namespace blk_error {
// no device-writable byte to put the status in: nothing can be reported
inline constexpr BlkError kNoStatusByte{Status::IoError, "no writable status byte"};
inline constexpr BlkError kHeaderTooShort{Status::IoError, "request header shorter than 16 bytes"};
inline constexpr BlkError kUnsupportedType{Status::Unsupported, "unsupported request type"};
// data in the readable part of a read, or the writable part of a write
inline constexpr BlkError kWrongDirection{Status::IoError, "data buffers in the wrong direction"};
inline constexpr BlkError kUnexpectedData{Status::IoError, "flush with data"};
// a transfer or discard/write-zeroes without data
inline constexpr BlkError kNoData{Status::IoError, "request without data"};
// not a multiple of 512 bytes (transfers) or 16 bytes (segments)
inline constexpr BlkError kUnalignedLength{Status::IoError,
                                           "data length not a multiple of the unit"};
inline constexpr BlkError kOutOfRange{Status::IoError, "request past the end of the disk"};
// a write, discard or write-zeroes on a read-only disk
inline constexpr BlkError kReadOnly{Status::IoError, "write to a read-only disk"};
inline constexpr BlkError kIdBufferTooShort{Status::IoError, "get-id buffer shorter than 20 bytes"};
// more than max_discard_seg / max_write_zeroes_seg (or kMaxSegments)
inline constexpr BlkError kTooManySegments{Status::IoError,
                                           "too many discard/write-zeroes segments"};
// more than max_discard_sectors / max_write_zeroes_sectors
inline constexpr BlkError kSegmentTooLarge{Status::IoError,
                                           "discard/write-zeroes segment too large"};
// unknown segment flags, or unmap on a discard
inline constexpr BlkError kUnsupportedFlags{Status::Unsupported,
                                            "unsupported discard/write-zeroes flags"};
}  // namespace blk_error

// A byte range of the disk to discard or zero.
struct DiskRange {
    uint64_t offset = 0;
    uint64_t length = 0;
    bool unmap = false;  // write-zeroes may deallocate
    bool operator==(const DiskRange&) const = default;
};

using DiskRanges = boost::container::static_vector<DiskRange, kMaxSegments>;

struct Request {
    RequestType type = RequestType::In;
    uint64_t offset = 0;     // In, Out: byte offset on the disk
    GuestBuffers data = {};  // In: filled from disk; Out: written; GetId: gets the id
    DiskRanges ranges = {};  // Discard, WriteZeroes
};

// Any layout is accepted: the header is the first 16 readable bytes, the status the last
// writable byte, and the data whatever lies between.
Result<Request, BlkError> parse(const DescriptorChain& chain, const DiskInfo& disk);

}  // namespace mvmm::devices::virtio::blk
