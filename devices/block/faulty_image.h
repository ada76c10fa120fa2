// Test support: a real image whose calls are counted and whose n-th call may throw, as a host
// that refuses to take an operation does (an io_uring with no room left, no memory): what the
// queues must turn into an error for the guest, never a request lost.
#pragma once

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "devices/block/disk_image.h"

namespace mvmm::devices::block::testing {

class FaultyImage final : public DiskImage {
  public:
    // `alignment`: what buffer_alignment() says (0: the image's own), so that a test can
    // bounce buffers without O_DIRECT.
    explicit FaultyImage(std::unique_ptr<DiskImage> image, size_t alignment = 0)
        : image_(std::move(image)), alignment_(alignment) {}

    // The `n`-th call from now (1: the next) throws; 0: none does.
    void throw_at(int n) {
        calls_.store(0);
        throw_at_.store(n);
    }
    int flushes() const { return flushes_.load(); }
    int calls() const { return calls_.load(); }  // since the last throw_at()

    const std::string& path() const noexcept override { return image_->path(); }
    ImageFormat format() const noexcept override { return image_->format(); }
    uint64_t size() const noexcept override { return image_->size(); }
    uint64_t reread_size(uint64_t block_size) override { return image_->reread_size(block_size); }
    bool read_only() const noexcept override { return image_->read_only(); }
    size_t buffer_alignment() const noexcept override {
        return alignment_ ? alignment_ : image_->buffer_alignment();
    }
    IoResult read(uint64_t offset, const GuestBuffers& into) const override {
        called();
        return image_->read(offset, into);
    }
    IoResult write(uint64_t offset, const GuestBuffers& from) const override {
        called();
        return image_->write(offset, from);
    }
    IoResult flush() override {
        called();
        ++flushes_;
        return image_->flush();
    }
    IoResult discard(uint64_t offset, uint64_t length) const override {
        called();
        return image_->discard(offset, length);
    }
    IoResult write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const override {
        called();
        return image_->write_zeroes(offset, length, may_unmap);
    }

  private:
    void called() const {
        if (++calls_ == throw_at_.load())
            throw std::runtime_error("the test's host refuses the operation");
    }

    std::unique_ptr<DiskImage> image_;
    const size_t alignment_;
    mutable std::atomic<int> calls_{0};
    std::atomic<int> throw_at_{0};
    std::atomic<int> flushes_{0};
};

}  // namespace mvmm::devices::block::testing
