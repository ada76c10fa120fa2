// One logical unit: a raw image, its size and read-only flag, and who it says it is.  It
// carries out the commands that touch the image; what a command returns otherwise is
// answered from its LunInfo and LunIdentity alone (responses.h).
#pragma once

#include <atomic>
#include <memory>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

#include "devices/block/disk_image.h"
#include "mem/guest_buffers.h"
#include "devices/virtio/scsi/cdb.h"
#include "devices/virtio/scsi/config.h"
#include "devices/virtio/scsi/responses.h"

namespace mvmm::devices::virtio::scsi {

// What a command did: GOOD or CHECK CONDITION with sense, and how many bytes it moved.
struct Outcome {
    std::optional<Sense> sense;  // set: CHECK CONDITION
    uint64_t transferred = 0;

    static Outcome good(uint64_t transferred = 0) { return {std::nullopt, transferred}; }
    static Outcome check(const Sense& sense) { return {sense, 0}; }
};

class Lun {
  public:
    // Opens and locks the image; throws block::ImageError for the user.
    explicit Lun(const LunConfig& config);

    const LunInfo& info() const noexcept { return info_; }
    const LunIdentity& identity() const noexcept { return identity_; }
    // For the owner's figures and idle-cache cleaning, whatever the format.
    block::DiskImage& image() const noexcept { return *image_; }

    // Each takes what parse_cdb() checked, and buffers at least as large as its transfer.
    // They are thread-safe: the request queues of a controller share its LUNs.
    Outcome read(const Read& command, const GuestBuffers& data_in);
    Outcome write(const Write& command, const GuestBuffers& data_out);
    Outcome synchronize_cache();  // fdatasync
    Outcome unmap(const GuestBuffers& parameter_list);
    Outcome write_same(const WriteSame& command, const GuestBuffers& data_out);

  private:
    // Logs the first host I/O error of this LUN as a warning, the rest at debug level.
    Outcome failed(std::string_view what, const std::error_code& error, const Sense& sense);

    std::unique_ptr<block::DiskImage> image_;
    LunInfo info_;
    LunIdentity identity_;
    std::atomic<bool> io_error_logged_{false};
};

}  // namespace mvmm::devices::virtio::scsi
