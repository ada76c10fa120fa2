// How a disk image is to be opened (the --disk keys that concern the image, not the device).
#pragma once

#include <string_view>

#include "devices/block/qcow2/options.h"

namespace mvmm::devices::block {

enum class ImageFormat {
    Auto,  // qcow2 when the file starts with qcow2's magic, raw otherwise
    Raw,
    Qcow2,
};
std::string_view to_string(ImageFormat format);

// cache=: whether the host's page cache holds the image's data.
enum class CacheMode {
    Writeback,  // through the page cache; a flush is fdatasync
    None,       // O_DIRECT: no second copy in the host; a flush is still fdatasync
};
std::string_view to_string(CacheMode mode);

// aio=: how requests reach the image (io_queue.h).
enum class AioMode { IoUring, Threads, Sync };

struct ImageOptions {
    ImageFormat format = ImageFormat::Auto;
    CacheMode cache = CacheMode::Writeback;
    qcow2::Qcow2Options qcow2 = {};  // its metadata caches; a raw image has none
};

}  // namespace mvmm::devices::block
