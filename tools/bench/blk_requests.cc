// The virtio-blk driver side of the request bench (requests.h): virtio_blk's requests, a
// 16-byte header, the data, a status byte.
#include <linux/virtio_blk.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <string_view>

#include "bench/requests.h"
#include "devices/virtio/blk/blk_device.h"

namespace mvmm::bench {
namespace {

namespace vt = devices::virtio::testing;

constexpr std::string_view kSerial = "request-bench";
constexpr uint64_t kSector = 512;
constexpr uint64_t kPage = 4096;
constexpr uint8_t kPending = 0xff;

struct Segment {  // struct virtio_blk_discard_write_zeroes
    uint64_t sector;
    uint32_t num_sectors;
    uint32_t flags;
};

struct Kind {
    const char* name;
    uint32_t type;
    uint64_t transfer = 0;  // a read or write of the image at a place the rig picks, this long
    uint32_t data_in = 0;   // another request's device-writable data
    std::vector<Segment> segments = {};  // discard, write-zeroes
    uint8_t status = VIRTIO_BLK_S_OK;
    uint64_t sector = 0;  // when not a transfer
};

// Every request virtio-blk serves, and two it refuses, 4 KiB transfers.
std::vector<Kind> mixed_kinds(uint64_t image_bytes) {
    const uint64_t scratch = (image_bytes - kScratchBytes) / kSector;
    const uint32_t unmap = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
    return {
        {.name = "read", .type = VIRTIO_BLK_T_IN, .transfer = kPage},
        {.name = "write", .type = VIRTIO_BLK_T_OUT, .transfer = kPage},
        {.name = "flush", .type = VIRTIO_BLK_T_FLUSH},
        {.name = "get-id", .type = VIRTIO_BLK_T_GET_ID, .data_in = VIRTIO_BLK_ID_BYTES},
        {.name = "discard",
         .type = VIRTIO_BLK_T_DISCARD,
         .segments = {{scratch, 8, 0}, {scratch + 64, 16, 0}, {0, 0, 0}}},
        {.name = "write-zeroes with unmap",
         .type = VIRTIO_BLK_T_WRITE_ZEROES,
         .segments = {{scratch + 8, 8, unmap}}},
        // tmpfs has no FALLOC_FL_ZERO_RANGE: the device writes these zeroes itself.
        {.name = "write-zeroes",
         .type = VIRTIO_BLK_T_WRITE_ZEROES,
         .segments = {{scratch + 512, 256, 0}}},
        {.name = "read past the end",
         .type = VIRTIO_BLK_T_IN,
         .data_in = 512,
         .status = VIRTIO_BLK_S_IOERR,
         .sector = image_bytes / kSector},
        {.name = "secure erase (not offered)",
         .type = VIRTIO_BLK_T_SECURE_ERASE,
         .status = VIRTIO_BLK_S_UNSUPP},
    };
}

class BlkRequests final : public DriverRequests {
  public:
    BlkRequests(Workload workload, uint64_t image_bytes)
        : workload_(workload),
          kinds_(workload == Workload::mixed
                     ? mixed_kinds(image_bytes)
                     : std::vector<Kind>{
                           {.name = "read",
                            .type = VIRTIO_BLK_T_IN,
                            .transfer = workload == Workload::rand4k ? kPage : 16 * kPage}}) {}

    Device device(const std::string& image, SlotSource request_alloc, uint16_t request_queues,
                  const BlkIo& blk_io, boost::asio::io_context& io) const override {
        devices::virtio::blk::DiskConfig disk;
        disk.path = image;
        disk.read_only = workload_ != Workload::mixed;
        disk.serial = std::string(kSerial);
        disk.queues = request_queues;
        disk.request_alloc = request_alloc;
        disk.aio = blk_io.aio;
        disk.image.cache = blk_io.cache;
        auto device = std::make_unique<devices::virtio::blk::BlkDevice>(disk, io);
        const auto* counters = &device->counters();
        return {std::move(device), counters};
    }
    uint16_t device_queues(uint16_t request_queues) const override { return request_queues; }
    std::vector<uint16_t> loaded_queues(uint16_t request_queues) const override {
        std::vector<uint16_t> queues(request_queues);
        for (uint16_t q = 0; q < request_queues; ++q) queues[q] = q;
        return queues;
    }
    size_t kinds(uint16_t) const override { return kinds_.size(); }

    std::vector<vt::Desc> lay_out(vt::TestGuest& guest, RequestSlot& slot) const override {
        const Kind& kind = kinds_[slot.kind];
        slot.transfer_bytes = kind.transfer;
        slot.header = guest.alloc(16);
        const uint32_t type[2] = {kind.type, 0};
        guest.write(slot.header, std::span(reinterpret_cast<const uint8_t*>(type), 8));
        guest.write(slot.header + 8, std::span(reinterpret_cast<const uint8_t*>(&kind.sector), 8));
        std::vector<vt::Desc> table{{slot.header.value(), 16, vt::kDescNext, 1}};
        auto add = [&](GuestAddr at, uint64_t bytes, bool writable) {
            const auto next = uint16_t(table.size() + 1);
            table.push_back({at.value(), uint32_t(bytes),
                             uint16_t(vt::kDescNext | (writable ? vt::kDescWrite : 0)), next});
        };
        if (kind.transfer) {
            slot.data = guest.alloc(kind.transfer, kPage);
            for (uint64_t page = 0; page < kind.transfer / kPage; ++page)
                add(slot.data + page * kPage, kPage, kind.type == VIRTIO_BLK_T_IN);
        } else if (kind.data_in) {
            slot.data = guest.alloc(kind.data_in);
            add(slot.data, kind.data_in, true);
        } else if (!kind.segments.empty()) {
            const uint64_t bytes = sizeof(Segment) * kind.segments.size();
            slot.data = guest.alloc(bytes);
            guest.write(slot.data,
                        std::span(reinterpret_cast<const uint8_t*>(kind.segments.data()), bytes));
            add(slot.data, bytes, false);
        }
        slot.response = guest.alloc(1);
        table.push_back({slot.response.value(), 1, vt::kDescWrite, 0});
        return table;
    }

    void prepare(const vt::TestGuest& guest, const RequestSlot& slot) const override {
        if (slot.transfer_bytes) {
            const uint64_t sector = slot.offset / kSector;
            guest.write(slot.header + 8, std::span(reinterpret_cast<const uint8_t*>(&sector), 8));
            if (kinds_[slot.kind].type == VIRTIO_BLK_T_OUT)
                fill_pattern(guest, slot.data, slot.transfer_bytes, slot.offset);
        }
        guest.write(slot.response, std::span(&kPending, 1));
    }

    void check(const vt::TestGuest& guest, const RequestSlot& slot,
               bool every_word) const override {
        const Kind& kind = kinds_[slot.kind];
        const uint8_t status = guest.memory().read<uint8_t>(slot.response).value();
        if (status != kind.status)
            throw std::runtime_error(std::string("virtio-blk ") + kind.name + ": status " +
                                     std::to_string(status) + ", expected " +
                                     std::to_string(kind.status));
        if (kind.transfer && kind.type == VIRTIO_BLK_T_IN)
            check_pattern(guest, slot.data, kind.transfer, slot.offset, every_word, "virtio-blk");
        if (kind.type == VIRTIO_BLK_T_GET_ID) {
            std::array<uint8_t, VIRTIO_BLK_ID_BYTES> id{};
            (void)guest.memory().read_bytes(slot.data, id);
            if (!std::equal(kSerial.begin(), kSerial.end(), id.begin()) || id[kSerial.size()] != 0)
                throw std::runtime_error("virtio-blk get-id: not the serial");
        }
    }

  private:
    const Workload workload_;
    const std::vector<Kind> kinds_;
};

}  // namespace

std::unique_ptr<const DriverRequests> blk_requests(Workload workload, uint64_t image_bytes) {
    return std::make_unique<BlkRequests>(workload, image_bytes);
}

}  // namespace mvmm::bench
