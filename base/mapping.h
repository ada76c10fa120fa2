// A move-only owner of an mmap()ed range.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace mvmm {

class Mapping {
  public:
    Mapping() = default;
    // Takes ownership of [addr, addr + size) as returned by mmap().
    Mapping(void* addr, size_t size) noexcept : addr_(addr), size_(size) {}
    ~Mapping() { reset(); }
    Mapping(Mapping&& o) noexcept
        : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
    Mapping& operator=(Mapping&& o) noexcept {
        if (this != &o) {
            reset();
            addr_ = std::exchange(o.addr_, nullptr);
            size_ = std::exchange(o.size_, 0);
        }
        return *this;
    }
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;

    // Anonymous private read/write memory; throws on failure.
    static Mapping anonymous(size_t size, int extra_flags = 0);

    std::span<uint8_t> bytes() const noexcept { return {static_cast<uint8_t*>(addr_), size_}; }
    size_t size() const noexcept { return size_; }
    bool valid() const noexcept { return addr_ != nullptr; }
    void reset() noexcept {
        if (addr_) ::munmap(addr_, size_);
        addr_ = nullptr;
        size_ = 0;
    }

  private:
    void* addr_ = nullptr;
    size_t size_ = 0;
};

// Bytes of `area` (page-aligned) in memory, by mincore(); throws std::system_error.
uint64_t resident_bytes(std::span<const uint8_t> area);

}  // namespace mvmm
