// Opening the images of a chain: the file checks and locks, the header and tables read and
// checked, the engine made.  Every failure throws ImageError with one line that names
// the disk (and the backing file at fault) and what is wrong.
#pragma once

#include <memory>
#include <string>

#include "base/fd.h"
#include "devices/block/qcow2/backing.h"
#include "devices/block/qcow2/engine.h"
#include "devices/block/qcow2/options.h"

namespace mvmm::devices::block::qcow2 {

// `label` names the file in messages: "disk image PATH", or "disk image TOP: backing file PATH".
[[noreturn]] void fail_open(const std::string& label, const std::string& why);

// Opens a regular file read-only (locked shared) or read-write (locked exclusive), with O_DIRECT
// when the chain's cache is none, and adds it to `chain`, refusing a loop and a chain deeper
// than kMaxBackingChain; sets `size`.
std::unique_ptr<ImageFile> open_image_file(const std::string& path, const std::string& label,
                                           bool read_only, Chain& chain, uint64_t& size);

// The qcow2 image in `fd` (and its backing chain), checked and ready.
std::unique_ptr<Engine> make_engine(const std::string& path, const std::string& label,
                                    std::unique_ptr<ImageFile> file, uint64_t file_size,
                                    bool read_only, const Qcow2Options& options, Chain& chain);

}  // namespace mvmm::devices::block::qcow2
