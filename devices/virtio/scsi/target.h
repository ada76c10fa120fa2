// One SCSI target of a controller and its LUNs: runs a CDB addressed to a LUN number, from
// parse to outcome.  A LUN with a unit attention pending reports it to the first command that
// is not INQUIRY, REPORT LUNS or REQUEST SENSE, which does not run.  A LUN number with no disk
// still answers INQUIRY (no device here), REPORT LUNS and REQUEST SENSE, as a real target does, so
// a guest finds every LUN with one REPORT LUNS instead of probing them one by one; anything else
// sent there is LOGICAL UNIT NOT SUPPORTED.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "devices/virtio/scsi/config.h"
#include "devices/virtio/scsi/lun.h"
#include "mem/guest_buffers.h"

namespace mvmm::devices::virtio::scsi {

// What the virtio transport reports besides the SCSI status.
enum class Delivery {
    Done,     // the command ran (GOOD or CHECK CONDITION)
    Overrun,  // the buffers do not fit the CDB's transfer: VIRTIO_SCSI_S_OVERRUN, nothing ran
};

struct TargetOutcome {
    Delivery delivery = Delivery::Done;
    Outcome outcome;
};

class Target {
  public:
    // Opens every LUN's image; throws std::runtime_error (an image) or std::invalid_argument
    // (a LUN number past kMaxLun or given twice, LUNs of another target).
    explicit Target(const std::vector<LunConfig>& luns);

    // Thread-safe: commands to any LUNs may run on several I/O threads at once.
    TargetOutcome execute(uint16_t lun, std::span<const uint8_t> cdb, const GuestBuffers& data_out,
                          const GuestBuffers& data_in);

    // The disk at `lun`, or nullptr.
    Lun* find(uint16_t lun) const { return lun < luns_.size() ? luns_[lun].get() : nullptr; }
    std::span<const uint16_t> lun_numbers() const { return numbers_; }
    // REPORT LUNS' whole answer, built once: the LUNs are fixed for the life of the VM.
    std::span<const uint8_t> report_luns() const { return report_luns_; }
    // Resets every LUN (Lun::reset): an I_T nexus reset, or the controller's reset.
    void reset();

  private:
    std::vector<std::unique_ptr<Lun>> luns_;  // indexed by LUN number, up to the highest
    std::vector<uint16_t> numbers_;           // ascending
    std::vector<uint8_t> report_luns_;
};

}  // namespace mvmm::devices::virtio::scsi
