// Compressed clusters: raw deflate streams (zlib, 4 KiB window, as QEMU writes them).  Reading
// only; this engine never writes compressed clusters.
#pragma once

#include <cstdint>
#include <span>

#include "devices/block/qcow2/file_io.h"

namespace mvmm::devices::block::qcow2 {

// Inflates `compressed` into exactly `cluster`: EIO when it is not deflate data, ends short of
// a cluster, or would inflate past one.  The input may run on past the stream's end (its size
// is only known to the sector).
IoResult inflate_cluster(std::span<const uint8_t> compressed, std::span<uint8_t> cluster);

}  // namespace mvmm::devices::block::qcow2
