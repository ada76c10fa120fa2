#include "devices/block/qcow2/qcow2_image.h"

#include <stdexcept>

#include <spdlog/spdlog.h>

#include "devices/block/qcow2/open.h"

namespace mvmm::devices::block::qcow2 {

std::unique_ptr<Qcow2Image> Qcow2Image::open(const std::string& path, bool read_only,
                                             const Qcow2Options& options, CacheMode cache) {
    const std::string label = "disk image " + path;
    Chain chain;
    chain.cache = cache;
    uint64_t file_size = 0;
    auto file = open_image_file(path, label, read_only, chain, file_size);
    auto engine = make_engine(path, label, std::move(file), file_size, read_only, options, chain);
    return std::make_unique<Qcow2Image>(Opened{}, path, std::move(engine), chain.alignment);
}

Qcow2Image::Qcow2Image(Opened, std::string path, std::unique_ptr<Engine> engine, size_t alignment)
    : path_(std::move(path)),
      size_(engine->size()),
      read_only_(engine->read_only()),
      alignment_(alignment),
      engine_(std::move(engine)) {}

Qcow2Image::~Qcow2Image() {
    if (read_only_) return;
    if (auto flushed = flush(); !flushed)
        spdlog::error("{}: flush at close failed: {}", path_, flushed.error().message());
}

uint64_t Qcow2Image::reread_size(uint64_t /*block_size*/) {
    throw std::runtime_error(path_ +
                             ": a qcow2 image's size is in its header, not the file's "
                             "length; resizing a qcow2 disk is not supported");
}

IoResult Qcow2Image::read(uint64_t offset, const GuestBuffers& into) const {
    return engine_->read(offset, into);
}

IoResult Qcow2Image::write(uint64_t offset, const GuestBuffers& from) const {
    return engine_->write(offset, from);
}

IoResult Qcow2Image::flush() {
    return engine_->flush();
}

IoResult Qcow2Image::discard(uint64_t offset, uint64_t length) const {
    return engine_->discard(offset, length);
}

IoResult Qcow2Image::write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const {
    return engine_->write_zeroes(offset, length, may_unmap);
}

std::chrono::seconds Qcow2Image::cache_clean_interval() const noexcept {
    return engine_->clean_interval();
}

size_t Qcow2Image::clean_idle(std::chrono::steady_clock::time_point now) {
    return engine_->clean_idle(now);
}

CacheStats Qcow2Image::cache_stats() const {
    CacheStats stats;
    engine_->add_stats(stats);
    return stats;
}

}  // namespace mvmm::devices::block::qcow2
