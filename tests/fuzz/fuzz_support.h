// What the fuzz targets share: a reader that takes fields off the front of libFuzzer's input
// (the formats are documented per target and written by make_seeds.py), and a scratch disk
// image.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/fd.h"

namespace mvmm::fuzz {

// Fields in order, little endian; past the end of the input every field reads as zero.
class ByteReader {
  public:
    explicit ByteReader(std::span<const uint8_t> data) : data_(data) {}

    template <class T>
    T take() {
        T value{};
        const size_t n = std::min(sizeof value, data_.size());
        std::memcpy(&value, data_.data(), n);
        data_ = data_.subspan(n);
        return value;
    }
    // Up to `n` bytes (fewer at the end of the input).
    std::span<const uint8_t> take_bytes(size_t n) {
        const auto bytes = data_.first(std::min(n, data_.size()));
        data_ = data_.subspan(bytes.size());
        return bytes;
    }
    std::span<const uint8_t> rest() const { return data_; }
    bool empty() const { return data_.empty(); }

  private:
    std::span<const uint8_t> data_;
};

// The bytes of a trivially copyable value, for guest writes.
template <class T>
std::span<const uint8_t> bytes_of(const T& value) {
    return {reinterpret_cast<const uint8_t*>(&value), sizeof value};
}

// A zero-filled image file in /dev/shm (flushes cost nothing there) or $TMPDIR, unlinked at
// exit; one per process is enough, since the disk is locked while open.
class ScratchImage {
  public:
    explicit ScratchImage(uint64_t size) {
        const char* tmp = std::getenv("TMPDIR");
        path_ = (::access("/dev/shm", W_OK) == 0 ? std::string("/dev/shm")
                                                 : std::string(tmp ? tmp : "/tmp")) +
                "/mvmm-fuzz-XXXXXX";
        Fd fd(::mkstemp(path_.data()));
        if (!fd.valid() || ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
            throw std::runtime_error("cannot create the scratch image " + path_);
    }
    ~ScratchImage() { ::unlink(path_.c_str()); }
    ScratchImage(const ScratchImage&) = delete;
    ScratchImage& operator=(const ScratchImage&) = delete;

    const std::string& path() const { return path_; }

  private:
    std::string path_;
};

}  // namespace mvmm::fuzz
