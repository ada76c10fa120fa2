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

struct ImageOptions {
    ImageFormat format = ImageFormat::Auto;
    qcow2::Qcow2Options qcow2;  // its metadata caches; a raw image has none
};

}  // namespace mvmm::devices::block
