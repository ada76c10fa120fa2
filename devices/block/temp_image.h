// Test support: a temporary disk image file, removed when the test ends, and buffers to move
// through it.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/fd.h"
#include "devices/block/disk_image.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::block::testing {

class TempImage {
  public:
    // `size` bytes of `fill`, in `dir` (default $TMPDIR or /tmp).
    explicit TempImage(uint64_t size, uint8_t fill = 0, std::string dir = default_dir()) {
        path_ = dir + "/mvmm-disk-test-XXXXXX";
        Fd fd(::mkstemp(path_.data()));
        if (!fd.valid()) throw_errno("mkstemp " + path_);
        write(0, std::vector<uint8_t>(size, fill));
    }
    ~TempImage() { ::unlink(path_.c_str()); }
    TempImage(const TempImage&) = delete;
    TempImage& operator=(const TempImage&) = delete;

    const std::string& path() const noexcept { return path_; }

    std::vector<uint8_t> read(uint64_t offset, uint64_t size) const {
        std::vector<uint8_t> out(size);
        Fd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
        if (::pread(fd.get(), out.data(), size, static_cast<off_t>(offset)) != ssize_t(size))
            throw std::runtime_error("short read of " + path_);
        return out;
    }
    void write(uint64_t offset, std::span<const uint8_t> bytes) const {
        Fd fd(::open(path_.c_str(), O_WRONLY | O_CLOEXEC));
        if (::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset)) !=
            ssize_t(bytes.size()))
            throw std::runtime_error("short write of " + path_);
    }

  private:
    static std::string default_dir() {
        const char* dir = std::getenv("TMPDIR");
        return dir && *dir ? dir : "/tmp";
    }

    std::string path_;
};

// `size` bytes counting up from `seed`.
inline std::vector<uint8_t> pattern(size_t size, uint8_t seed) {
    std::vector<uint8_t> bytes(size);
    std::iota(bytes.begin(), bytes.end(), seed);
    return bytes;
}

// 1 KiB of a request scattered over guest pages: buffers of 100, 412 and 512 bytes.
class ScatteredBuffers {
  public:
    GuestBuffers scattered() const { return GuestBuffers(parts_); }
    // What they hold, in order.
    std::vector<uint8_t> gathered() const {
        std::vector<uint8_t> out(a_.begin(), a_.begin() + 100);
        out.insert(out.end(), b_.begin(), b_.begin() + 412);
        out.insert(out.end(), c_.begin(), c_.end());
        return out;
    }

  private:
    std::vector<uint8_t> a_ = pattern(100, 1), b_ = pattern(412, 50), c_ = pattern(512, 200);
    const GuestBuffers::Part parts_[3] = {GuestSlice(std::span(a_).first(100)),
                                          GuestSlice(std::span(b_).first(412)), GuestSlice(c_)};
};

inline std::vector<uint8_t> filled(size_t size, uint8_t value) {
    return std::vector<uint8_t>(size, value);
}

// A 64 KiB image of 0xaa bytes, open read-write, and buffers to move through it.
class ImageTest : public ::testing::Test {
  protected:
    GuestBuffers scattered() { return buffers_.scattered(); }
    std::vector<uint8_t> gathered() const { return buffers_.gathered(); }

    TempImage file{64 * 1024, 0xaa};
    std::unique_ptr<DiskImage> image = open_disk_image(file.path(), false);

  private:
    ScatteredBuffers buffers_;
};

}  // namespace mvmm::devices::block::testing
