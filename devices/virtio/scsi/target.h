// One SCSI target of a controller and its LUNs: runs a CDB addressed to a LUN number, from
// parse to outcome.  A LUN with a unit attention pending reports it to the first command that
// is not INQUIRY, REPORT LUNS or REQUEST SENSE, which does not run.  A LUN number with no disk
// still answers INQUIRY (no device here), REPORT LUNS and REQUEST SENSE, as a real target does, so
// a guest finds every LUN with one REPORT LUNS instead of probing them one by one; anything else
// sent there is LOGICAL UNIT NOT SUPPORTED.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <variant>
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

// A command checked against its LUN, ready to run: nothing has touched the image yet.
struct CheckedCommand {
    Lun* lun = nullptr;  // null only for what a LUN number with no disk answers
    LunInfo info;        // what it was parsed against
    Command command;
};

// Immutable once built: a change of LUNs builds a new Target (with_lun, without_lun) that
// shares the other LUNs, and the controller publishes it in a new TargetTable snapshot; a
// command holds the snapshot it started with, and so its Lun, until it completes.
class Target {
  public:
    // Opens every LUN's image; throws std::runtime_error (an image) or std::invalid_argument
    // (a LUN number past kMaxLun or given twice, LUNs of another target).
    explicit Target(const std::vector<LunConfig>& luns);

    // This target with `lun` at `number` too; throws std::invalid_argument when the number
    // is past kMaxLun or taken.
    Target with_lun(uint16_t number, std::shared_ptr<Lun> lun) const;
    // This target without the LUN at `number`; throws std::invalid_argument when none is.
    Target without_lun(uint16_t number) const;
    bool empty() const noexcept { return numbers_.empty(); }

    // Thread-safe: commands to any LUNs may run on several I/O threads at once.
    // Everything before the command runs: the unit attention, the parse, the buffers' fit.
    // Either the answer already, or the command to run.
    std::variant<TargetOutcome, CheckedCommand> check(uint16_t lun, std::span<const uint8_t> cdb,
                                                      const GuestBuffers& data_out,
                                                      const GuestBuffers& data_in) const;
    // Runs a checked command to the end on this thread; nullopt for READ, WRITE and
    // SYNCHRONIZE CACHE, which a request queue runs as image operations through the LUN's
    // IoQueue (Lun::io_operation), and which only a LUN with a disk gets past check().
    std::optional<Outcome> run(const CheckedCommand& checked, const GuestBuffers& data_out,
                               const GuestBuffers& data_in) const;

    // The disk at `lun`, or nullptr.
    Lun* find(uint16_t lun) const { return lun < luns_.size() ? luns_[lun].get() : nullptr; }
    // The same, owned: what a snapshot keeps alive.
    std::shared_ptr<Lun> share(uint16_t lun) const {
        return lun < luns_.size() ? luns_[lun] : nullptr;
    }
    std::span<const uint16_t> lun_numbers() const { return numbers_; }
    // REPORT LUNS' whole answer, built with the target: this set of LUNs' list.
    std::span<const uint8_t> report_luns() const { return report_luns_; }
    // Resets every LUN (Lun::reset): an I_T nexus reset, or the controller's reset.
    void reset() const;
    // Every LUN but `except` reports REPORTED LUNS DATA HAS CHANGED (a LUN came or went).
    void report_luns_changed(uint16_t except) const;

  private:
    using Luns = std::vector<std::shared_ptr<Lun>>;
    explicit Target(Luns luns);
    void index();  // numbers_ and report_luns_ from luns_

    Luns luns_;                      // indexed by LUN number, up to the highest
    std::vector<uint16_t> numbers_;  // ascending
    std::vector<uint8_t> report_luns_;
};

// The controller's targets, indexed by target number (null: no such target).
using Targets = std::vector<std::shared_ptr<const Target>>;

// The target `number` of `targets`, or nullptr.
inline const Target* find_target(const Targets& targets, uint8_t number) {
    return number < targets.size() ? targets[number].get() : nullptr;
}

// The current Targets, read by the request and control queues while the management thread
// swaps LUNs: a reader holds the snapshot it loaded (and so every Lun in it) for as long as
// it needs it; the last holder of a replaced snapshot frees it, and with it a removed Lun,
// whose image is then flushed and closed.
class TargetTable {
  public:
    explicit TargetTable(Targets initial)
        : current_(std::make_shared<const Targets>(std::move(initial))) {}
    std::shared_ptr<const Targets> load() const { return current_.load(); }
    // Writers serialize among themselves.
    void publish(Targets next) { current_.store(std::make_shared<const Targets>(std::move(next))); }

  private:
    std::atomic<std::shared_ptr<const Targets>> current_;
};

}  // namespace mvmm::devices::virtio::scsi
