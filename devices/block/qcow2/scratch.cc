#include "devices/block/qcow2/scratch.h"

#include <unistd.h>

namespace mvmm::devices::block::qcow2 {
namespace {

uint64_t page_rounded(uint64_t bytes) {
    const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
}

}  // namespace

ScratchPool::ScratchPool(uint64_t cluster_size, size_t alignment, uint32_t slots)
    : cluster_(page_rounded(cluster_size)),
      compressed_(page_rounded(2 * cluster_size + 2 * alignment)),
      slots_(3 * cluster_ + compressed_, slots) {}

ScratchPool::Lease::~Lease() {
    slot_.reset();
    const std::lock_guard lock(pool_->mutex_);
    pool_->released_.notify_one();
}

std::span<uint8_t> ScratchPool::Lease::area(uint64_t at, uint64_t bytes) const {
    return {reinterpret_cast<uint8_t*>(slot_->bytes().data()) + at, bytes};
}

ScratchPool::Lease ScratchPool::acquire() {
    std::unique_lock lock(mutex_);
    for (;;) {
        if (auto slot = slots_.acquire()) return Lease(*this, std::move(*slot));
        released_.wait(lock);
    }
}

}  // namespace mvmm::devices::block::qcow2
