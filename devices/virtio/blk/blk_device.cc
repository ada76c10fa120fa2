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

BlkDevice::BlkDevice(const DiskConfig& config, boost::asio::io_context& io)
    : image_(block::open_disk_image(config.path, config.read_only, config.image)),
      sizes_(checked_sizes(config)),
      serial_(disk_serial(config)),
      info_{.capacity_sectors = image_->size() / kSectorSize,
            .read_only = config.read_only,
            .max_discard_sectors = kMaxDiscardSectors,
            .max_discard_segments = kMaxDiscardSegments,
            .max_write_zeroes_sectors = kMaxWriteZeroesSectors,
            .max_write_zeroes_segments = kMaxWriteZeroesSegments},
      capacity_sectors_(info_.capacity_sectors),
      aio_(block::checked_aio_mode(config.aio, config.path)),
      disk_{*image_, serial_, info_, capacity_sectors_, counters_},
      features_(offered_features(config)),
      num_queues_(checked_queues(config.queues)),
      queue_size_(checked_queue_size(config.queue_size, "virtio-blk")),
      config_space_(make_config_space(info_, sizes_, num_queues_, queue_size_)),
      workers_(io, "virtio-blk " + config.path, counters_, config.request_alloc) {
    check_image_fits(config.path, image_->size(), sizes_);
}

void BlkDevice::read_config(uint64_t offset, std::span<uint8_t> data) const {
    std::array<uint8_t, sizeof(ConfigSpace)> config;
    std::ranges::copy(config_space_, config.begin());
    const uint64_t capacity = capacity_sectors_.load();
    std::memcpy(config.data() + offsetof(ConfigSpace, capacity), &capacity, sizeof capacity);
    read_config_space(config, offset, data);
}

uint64_t BlkDevice::resize_from_image() {
    const uint64_t bytes = image_->reread_size(sizes_.logical);
    if (capacity_sectors_.exchange(bytes / kSectorSize) == bytes / kSectorSize) return bytes;
    std::lock_guard lock(interrupt_mutex_);
    if (interrupt_) interrupt_->notify_config();  // virtio 1.2, 5.2.2: the capacity changed
    return bytes;
}

void BlkDevice::write_config(uint64_t offset, std::span<const uint8_t> data) {
    // Nothing is writable: `writeback` is only writable with VIRTIO_BLK_F_CONFIG_WCE.
    spdlog::debug("virtio-blk {}: ignored config write of {} bytes at {}", image_->path(),
                  data.size(), offset);
}

bool BlkDevice::activate(ActivateContext context) {
    workers_.stop();
    queues_.clear();
    // Without FLUSH negotiated, a completed write must already be stable (virtio 1.2, 5.2.6.2).
    disk_.write_through = !(context.features & kFeatureFlush);
    try {
        for (uint16_t i = 0; i < num_queues_; ++i)
            queues_.push_back(std::make_unique<BlkQueue>(disk_, aio_, queue_size_));
    } catch (const std::exception& e) {
        spdlog::error("virtio-blk {}: cannot set up aio={}: {}", image_->path(),
                      block::to_string(aio_), e.what());
        queues_.clear();
        return false;
    }
    {
        std::lock_guard lock(interrupt_mutex_);
        interrupt_ = &context.interrupt;
    }
    return workers_.start(context, num_queues_, queue_size_, [this](uint16_t i) {
        return static_cast<AsyncRequestHandler*>(queues_[i].get());
    });
}

void BlkDevice::reset() {
    {
        std::lock_guard lock(interrupt_mutex_);
        interrupt_ = nullptr;
    }
    workers_.stop();
    queues_.clear();
    counters_.needs_reset.store(false);
}

}  // namespace mvmm::devices::virtio::blk
