#include "devices/block/disk_image.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "base/fd.h"
#include "devices/block/qcow2/qcow2_image.h"
#include "devices/block/raw_image.h"

namespace mvmm::devices::block {

namespace {

// Writes of repeated patterns take this many pieces at a time.
constexpr size_t kPatternPieces = 64;

// qcow2's magic, "QFI\xfb", at byte 0.
bool starts_like_qcow2(const std::string& path) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    std::array<uint8_t, 4> magic{};
    if (!fd.valid() || ::pread(fd.get(), magic.data(), magic.size(), 0) != ssize_t(magic.size()))
        return false;  // opening it as raw says what is wrong
    return magic == std::array<uint8_t, 4>{'Q', 'F', 'I', 0xfb};
}

}  // namespace

std::string_view to_string(ImageFormat format) {
    switch (format) {
        case ImageFormat::Auto:
            return "auto";
        case ImageFormat::Raw:
            return "raw";
        case ImageFormat::Qcow2:
            return "qcow2";
    }
    return "?";
}

std::string_view to_string(CacheMode mode) {
    return mode == CacheMode::None ? "none" : "writeback";
}

IoResult DiskImage::write_repeated(uint64_t offset, uint64_t length,
                                   GuestBuffers::Part pattern) const {
    if (pattern.empty()) return Unexpected{std::make_error_code(std::errc::invalid_argument)};
    std::array<GuestBuffers::Part, kPatternPieces> parts;
    parts.fill(pattern);
    const GuestBuffers window(parts);  // one vectored write's worth
    for (uint64_t done = 0; done < length; done += window.size()) {
        auto written = write(offset + done, window.slice(0, length - done));
        if (!written) return written;
    }
    return Ok{};
}

std::unique_ptr<DiskImage> open_disk_image(const std::string& path, bool read_only,
                                           const ImageOptions& options) {
    ImageFormat format = options.format;
    if (format == ImageFormat::Auto)
        format = starts_like_qcow2(path) ? ImageFormat::Qcow2 : ImageFormat::Raw;
    if (format == ImageFormat::Qcow2)
        return qcow2::Qcow2Image::open(path, read_only, options.qcow2, options.cache);
    return RawImage::open(path, read_only, options.cache);
}

std::string serial_from_file_name(std::string_view path, size_t max_bytes) {
    std::string_view name = path.substr(path.find_last_of('/') + 1);  // npos + 1 is 0
    if (name.size() > max_bytes) name.remove_prefix(name.size() - max_bytes);
    std::string serial(name);
    std::ranges::replace_if(
        serial, [](char c) { return c < 0x20 || c >= 0x7f; }, '_');
    return serial;
}

}  // namespace mvmm::devices::block
