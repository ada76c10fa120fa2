#include "mem/slot_pool.h"

#include <cstdlib>
#include <limits>
#include <new>
#include <stdexcept>
#include <utility>

namespace mvmm {

std::string_view to_string(SlotSource source) {
    switch (source) {
        case SlotSource::pool:
            return "pool";
        case SlotSource::malloc:
            return "malloc";
        case SlotSource::calloc:
            return "calloc";
    }
    return "unknown";
}

namespace {

size_t checked_slot_size(size_t size, uint32_t capacity) {
    if (size == 0 || capacity == 0)
        throw std::invalid_argument("a slot pool needs a slot size and a capacity");
    if (size > std::numeric_limits<size_t>::max() / capacity - SlotPool::kAlignment)
        throw std::invalid_argument("slot pool larger than the address space");
    return (size + SlotPool::kAlignment - 1) / SlotPool::kAlignment * SlotPool::kAlignment;
}

}  // namespace

SlotPool::Slot::Slot(Slot&& other) noexcept
    : pool_(other.pool_), data_(std::exchange(other.data_, nullptr)) {}

SlotPool::Slot& SlotPool::Slot::operator=(Slot&& other) noexcept {
    if (this != &other) {
        reset();
        pool_ = other.pool_;
        data_ = std::exchange(other.data_, nullptr);
    }
    return *this;
}

void SlotPool::Slot::reset() noexcept {
    if (data_) pool_->release(std::exchange(data_, nullptr));
}

SlotPool::SlotPool(size_t slot_size, uint32_t capacity, SlotSource source)
    : slot_size_(checked_slot_size(slot_size, capacity)), capacity_(capacity), source_(source) {
    if (source_ != SlotSource::pool) return;
    // MAP_NORESERVE: the pool is address space until used; its pages are charged as touched.
    mapping_ = Mapping::anonymous(slot_size_ * capacity_, MAP_NORESERVE);
    free_.reserve(capacity_);
}

std::optional<SlotPool::Slot> SlotPool::acquire() {
    std::unique_lock lock(mutex_);
    if (in_use_ == capacity_) return std::nullopt;
    if (++in_use_ > peak_in_use_.load(std::memory_order_relaxed))
        peak_in_use_.store(in_use_, std::memory_order_relaxed);
    if (source_ == SlotSource::pool) {
        uint32_t index = fresh_;
        if (free_.empty()) {
            ++fresh_;
        } else {
            index = free_.back();
            free_.pop_back();
        }
        auto* data = reinterpret_cast<std::byte*>(mapping_.bytes().data()) + index * slot_size_;
        return Slot(*this, data);
    }
    lock.unlock();
    void* data =
        source_ == SlotSource::calloc ? std::calloc(1, slot_size_) : std::malloc(slot_size_);
    if (!data) {
        release(nullptr);
        throw std::bad_alloc();
    }
    return Slot(*this, static_cast<std::byte*>(data));
}

void SlotPool::release(std::byte* data) noexcept {
    if (source_ != SlotSource::pool) std::free(data);
    std::lock_guard lock(mutex_);
    --in_use_;
    if (source_ == SlotSource::pool) {
        const auto offset = data - reinterpret_cast<std::byte*>(mapping_.bytes().data());
        free_.push_back(static_cast<uint32_t>(static_cast<size_t>(offset) / slot_size_));
    }
}

uint32_t SlotPool::in_use() const {
    std::lock_guard lock(mutex_);
    return in_use_;
}

uint64_t SlotPool::resident_bytes() const {
    return mapping_.valid() ? mvmm::resident_bytes(mapping_.bytes()) : 0;
}

}  // namespace mvmm
