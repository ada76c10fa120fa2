// Backing files: what an overlay's unallocated clusters read from.  A chain of qcow2 and raw
// images, each opened read-only with a shared lock; names are resolved as QEMU resolves them,
// the format comes from the overlay's header extension or is probed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "devices/block/cache_stats.h"
#include "devices/block/image_options.h"
#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/options.h"

namespace mvmm::devices::block::qcow2 {

inline constexpr size_t kMaxBackingChain = 32;  // images below the top one

class BackingFile {
  public:
    virtual ~BackingFile() = default;
    virtual uint64_t size() const = 0;
    // Bytes [offset, offset + into.size()), all inside size().
    virtual IoResult read(uint64_t offset, const GuestBuffers& into) const = 0;
    // The chain's caches: clean_idle() and stats() of a qcow2 image, nothing for raw.
    virtual size_t clean_idle(std::chrono::steady_clock::time_point now) = 0;
    virtual void add_stats(CacheStats& stats) const = 0;
};

// The files of a chain being opened, top first, to refuse a loop and a chain too deep.
struct Chain {
    std::string top;  // the path the owner opened, for messages
    std::vector<std::pair<dev_t, ino_t>> files;
    CacheMode cache = CacheMode::Writeback;  // every file of the chain is opened so, as in QEMU
    size_t alignment = 1;                    // the largest ImageFile::alignment() of its files
};

// QEMU's path_combine: an absolute name as it is, a relative one from the overlay's directory.
std::string resolve_backing_path(const std::string& overlay_path, const std::string& name);

// The format a header extension names (nullopt: one we do not open).
std::optional<ImageFormat> parse_format(const std::string& name);
// What the first bytes of a file look like.
ImageFormat probe_format(std::span<const uint8_t> first_bytes);

// Opens the backing file of an overlay read-only (and, for qcow2, its own chain).  Throws
// ImageError naming the file and what is wrong.
std::unique_ptr<BackingFile> open_backing(const std::string& overlay_path, const std::string& name,
                                          const std::string& format, const Qcow2Options& options,
                                          Chain& chain);

}  // namespace mvmm::devices::block::qcow2
