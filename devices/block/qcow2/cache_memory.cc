#include "devices/block/qcow2/cache_memory.h"

#include <sys/mman.h>
#include <unistd.h>

namespace mvmm::devices::block::qcow2 {
namespace {

constexpr size_t kHeapAlignment = 4096;  // QEMU's qemu_blockalign on a host page

uint64_t page_size() {
    return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

CacheMemory::CacheMemory(CacheAlloc alloc, size_t table_size, size_t slots)
    : alloc_(alloc), table_size_(table_size) {
    if (alloc == CacheAlloc::Mapping) {
        const uint64_t page = page_size();
        mapping_ = Mapping::anonymous((slots * table_size + page - 1) / page * page, MAP_NORESERVE);
    } else {
        tables_.resize(slots);
    }
}

std::span<uint8_t> CacheMemory::hold(size_t slot) {
    if (alloc_ == CacheAlloc::Mapping) return table(slot);
    if (!tables_[slot]) {
        void* table = nullptr;
        if (::posix_memalign(&table, kHeapAlignment, table_size_) != 0) return {};
        tables_[slot].reset(static_cast<uint8_t*>(table));
        ++held_;
    }
    return table(slot);
}

std::span<uint8_t> CacheMemory::table(size_t slot) const {
    if (alloc_ == CacheAlloc::Mapping)
        return mapping_.bytes().subspan(slot * table_size_, table_size_);
    return {tables_[slot].get(), table_size_};
}

void CacheMemory::drop(size_t slot) {
    if (alloc_ == CacheAlloc::Heap && tables_[slot]) {
        tables_[slot].reset();
        --held_;
    }
}

void CacheMemory::give_back(size_t first, size_t count) {
    if (alloc_ != CacheAlloc::Mapping || count == 0) return;
    const uint64_t page = page_size();
    const uint64_t begin = (first * table_size_ + page - 1) / page * page;
    const uint64_t end = (first + count) * table_size_ / page * page;
    if (end > begin) ::madvise(mapping_.bytes().data() + begin, end - begin, MADV_DONTNEED);
}

uint64_t CacheMemory::bytes_allocated() const {
    return alloc_ == CacheAlloc::Mapping ? mapping_.size() : held_ * table_size_;
}

uint64_t CacheMemory::bytes_resident() const {
    return alloc_ == CacheAlloc::Mapping ? resident_bytes(mapping_.bytes()) : held_ * table_size_;
}

}  // namespace mvmm::devices::block::qcow2
