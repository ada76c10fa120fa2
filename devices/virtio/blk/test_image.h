// Test support: a temporary disk image file, removed when the test ends.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "devices/virtio/blk/config.h"
#include "mem/fd.h"

namespace mvmm::devices::virtio::blk::testing {

class TempImage {
  public:
    // `size` bytes of `fill`, in `dir` (default $TMPDIR or /tmp).
    explicit TempImage(uint64_t size, uint8_t fill = 0, std::string dir = default_dir()) {
        path_ = dir + "/mvmm-blk-test-XXXXXX";
        Fd fd(::mkstemp(path_.data()));
        if (!fd.valid()) throw_errno("mkstemp " + path_);
        write(0, std::vector<uint8_t>(size, fill));
    }
    ~TempImage() { ::unlink(path_.c_str()); }
    TempImage(const TempImage&) = delete;
    TempImage& operator=(const TempImage&) = delete;

    const std::string& path() const noexcept { return path_; }
    DiskConfig config(bool read_only = false) const {
        DiskConfig config;
        config.path = path_;
        config.read_only = read_only;
        return config;
    }

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

}  // namespace mvmm::devices::virtio::blk::testing
