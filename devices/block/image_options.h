// How a disk image is to be opened (the --disk keys that concern the image, not the device).
#pragma once

#include <string_view>

namespace mvmm::devices::block {

enum class ImageFormat {
    Auto,  // qcow2 when the file starts with qcow2's magic, raw otherwise
    Raw,
    Qcow2,
};
std::string_view to_string(ImageFormat format);

struct ImageOptions {
    ImageFormat format = ImageFormat::Auto;
};

}  // namespace mvmm::devices::block
