#include "devices/virtio/blk/blk_device.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace mvmm::devices::virtio::blk {
namespace {

constexpr uint64_t bit(unsigned n) {
    return 1ull << n;
}
constexpr uint64_t kFeatureSegMax = bit(2);
constexpr uint64_t kFeatureReadOnly = bit(5);
constexpr uint64_t kFeatureBlkSize = bit(6);
constexpr uint64_t kFeatureFlush = bit(9);
constexpr uint64_t kFeatureTopology = bit(10);
constexpr uint64_t kFeatureMultiQueue = bit(12);
constexpr uint64_t kFeatureDiscard = bit(13);
constexpr uint64_t kFeatureWriteZeroes = bit(14);

constexpr uint32_t kMaxDiscardSectors = 1u << 21;       // 1 GiB per segment; hole punching is cheap
constexpr uint32_t kMaxDiscardSegments = kMaxSegments;  // what a request holds
// 128 MiB: where fallocate cannot zero, the I/O thread writes the zeroes itself, and reset()
// waits for it.
constexpr uint32_t kMaxWriteZeroesSectors = 1u << 18;
constexpr uint32_t kMaxWriteZeroesSegments = 1;
constexpr uint32_t kDiscardAlignmentSectors = 8;  // host filesystems deallocate 4 KiB blocks

// struct virtio_blk_config, little-endian like the host; what is not offered reads 0.
struct ConfigSpace {
    uint64_t capacity = 0;
    uint32_t size_max = 0;
    uint32_t seg_max = 0;
    uint16_t cylinders = 0;
    uint8_t heads = 0;
    uint8_t sectors = 0;
    uint32_t blk_size = 0;
    uint8_t physical_block_exp = 0;
    uint8_t alignment_offset = 0;
    uint16_t min_io_size = 0;
    uint32_t opt_io_size = 0;
    uint8_t writeback = 0;
    uint8_t unused0 = 0;
    uint16_t num_queues = 0;
    uint32_t max_discard_sectors = 0;
    uint32_t max_discard_seg = 0;
    uint32_t discard_sector_alignment = 0;
    uint32_t max_write_zeroes_sectors = 0;
    uint32_t max_write_zeroes_seg = 0;
    uint8_t write_zeroes_may_unmap = 0;
    uint8_t unused1[3] = {};
};
static_assert(offsetof(ConfigSpace, blk_size) == 20);
static_assert(offsetof(ConfigSpace, num_queues) == 34);
static_assert(offsetof(ConfigSpace, write_zeroes_may_unmap) == 56);

uint16_t checked_queues(uint16_t queues) {
    if (queues < 1 || queues > kMaxQueues)
        throw std::invalid_argument("virtio-blk: queues must be 1 to " +
                                    std::to_string(kMaxQueues));
    return queues;
}

uint64_t offered_features(const DiskConfig& config) {
    uint64_t features = kFeatureVersion1 | kFeatureIndirectDesc | kFeatureEventIdx |
                        kFeatureSegMax | kFeatureBlkSize | kFeatureFlush | kFeatureTopology;
    if (config.queues > 1) features |= kFeatureMultiQueue;
    features |= config.read_only ? kFeatureReadOnly : kFeatureDiscard | kFeatureWriteZeroes;
    return features;
}

std::vector<uint8_t> make_config_space(const DiskInfo& info, const BlockSizes& sizes,
                                       uint16_t num_queues, uint16_t queue_size) {
    const ConfigSpace config{
        .capacity = info.capacity_sectors,
        .seg_max = queue_size - 2u,  // a chain also holds the header and the status
        .blk_size = sizes.logical,
        .physical_block_exp = sizes.physical_exponent(),
        .min_io_size = 1,  // in logical blocks
        .num_queues = num_queues,
        .max_discard_sectors = info.max_discard_sectors,
        .max_discard_seg = info.max_discard_segments,
        .discard_sector_alignment = kDiscardAlignmentSectors,
        .max_write_zeroes_sectors = info.max_write_zeroes_sectors,
        .max_write_zeroes_seg = info.max_write_zeroes_segments,
        .write_zeroes_may_unmap = 1,
    };
    const auto* bytes = reinterpret_cast<const uint8_t*>(&config);
    return std::vector<uint8_t>(bytes, bytes + sizeof config);
}

BlockSizes checked_sizes(const DiskConfig& config) {
    return checked_block_sizes(config.logical_block_size, config.physical_block_size);
}

}  // namespace

BlkDevice::Requests::Requests(const DiskConfig& config, BlkCounters& counters)
    : image(block::open_disk_image(config.path, config.read_only, config.image)),
      sizes(checked_sizes(config)),
      serial(disk_serial(config)),
      info{.capacity_sectors = image->size() / kSectorSize,
           .read_only = config.read_only,
           .max_discard_sectors = kMaxDiscardSectors,
           .max_discard_segments = kMaxDiscardSegments,
           .max_write_zeroes_sectors = kMaxWriteZeroesSectors,
           .max_write_zeroes_segments = kMaxWriteZeroesSegments},
      capacity_sectors(info.capacity_sectors),
      counters_(counters) {
    check_image_fits(config.path, image->size(), sizes);
}

uint32_t BlkDevice::Requests::handle(const DescriptorChain& chain) {
    Status status = Status::Ok;
    DiskInfo disk = info;
    disk.capacity_sectors = capacity_sectors.load();  // resize_from_image() may change it
    auto request = parse(chain, disk);
    if (!request) {
        ++counters_.bad_requests;
        spdlog::debug("virtio-blk {}: bad request: {}", image->path(), request.error().what);
        if (request.error() == blk_error::kNoStatusByte) return 0;
        status = request.error().status;
    } else if (auto done = execute(*request, *image, serial, write_through); !done) {
        ++counters_.io_errors;
        spdlog::log(io_error_logged_.exchange(true) ? spdlog::level::debug : spdlog::level::warn,
                    "virtio-blk {}: I/O error: {}", image->path(), done.error().message());
        status = Status::IoError;
    }
    const auto byte = static_cast<uint8_t>(status);
    chain.writable.copy_from(chain.writable.size() - 1, std::span(&byte, 1));
    // As QEMU does: the status byte ends the writable part, so all of it counts as written.
    return static_cast<uint32_t>(chain.writable.size());
}

BlkDevice::BlkDevice(const DiskConfig& config, boost::asio::io_context& io)
    : requests_(config, counters_),
      features_(offered_features(config)),
      num_queues_(checked_queues(config.queues)),
      queue_size_(checked_queue_size(config.queue_size, "virtio-blk")),
      config_space_(make_config_space(requests_.info, requests_.sizes, num_queues_, queue_size_)),
      workers_(io, "virtio-blk " + config.path, counters_, config.request_alloc) {}

void BlkDevice::read_config(uint64_t offset, std::span<uint8_t> data) const {
    std::array<uint8_t, sizeof(ConfigSpace)> config;
    std::ranges::copy(config_space_, config.begin());
    const uint64_t capacity = requests_.capacity_sectors.load();
    std::memcpy(config.data() + offsetof(ConfigSpace, capacity), &capacity, sizeof capacity);
    read_config_space(config, offset, data);
}

uint64_t BlkDevice::resize_from_image() {
    const uint64_t bytes = requests_.image->reread_size(requests_.sizes.logical);
    if (requests_.capacity_sectors.exchange(bytes / kSectorSize) == bytes / kSectorSize)
        return bytes;
    std::lock_guard lock(interrupt_mutex_);
    if (interrupt_) interrupt_->notify_config();  // virtio 1.2, 5.2.2: the capacity changed
    return bytes;
}

void BlkDevice::write_config(uint64_t offset, std::span<const uint8_t> data) {
    // Nothing is writable: `writeback` is only writable with VIRTIO_BLK_F_CONFIG_WCE.
    spdlog::debug("virtio-blk {}: ignored config write of {} bytes at {}", requests_.image->path(),
                  data.size(), offset);
}

bool BlkDevice::activate(ActivateContext context) {
    workers_.stop();
    // Without FLUSH negotiated, a completed write must already be stable (virtio 1.2, 5.2.6.2).
    requests_.write_through = !(context.features & kFeatureFlush);
    {
        std::lock_guard lock(interrupt_mutex_);
        interrupt_ = &context.interrupt;
    }
    return workers_.start(context, num_queues_, queue_size_,
                          [this](uint16_t) -> RequestHandler* { return &requests_; });
}

void BlkDevice::reset() {
    {
        std::lock_guard lock(interrupt_mutex_);
        interrupt_ = nullptr;
    }
    workers_.stop();
    counters_.needs_reset.store(false);
}

}  // namespace mvmm::devices::virtio::blk
