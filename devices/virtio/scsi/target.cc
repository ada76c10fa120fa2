#include "devices/virtio/scsi/target.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr uint8_t kRequestSense = 0x03, kInquiry = 0x12, kReportLuns = 0xa0;

// Whether the driver's buffers carry the CDB's transfer: data the wrong way, or less room
// than the CDB moves, is an overrun (virtio 1.2, 5.6.6.1), as QEMU reports it.
bool fits(const Command& command, const GuestBuffers& data_out, const GuestBuffers& data_in) {
    switch (command.direction) {
        case Direction::None:
            return true;
        case Direction::In:
            return data_out.empty() && command.transfer_bytes <= data_in.size();
        case Direction::Out:
            return data_in.empty() && command.transfer_bytes <= data_out.size();
    }
    return false;
}

// Runs one parsed command, or leaves it to a request queue's IoQueue (nullopt).  `lun` is
// null only for the commands a LUN with no disk answers.
class Runner {
  public:
    using Ran = std::optional<Outcome>;

    Runner(Lun* lun, const LunInfo& info, const Target& target, const Command& command,
           const GuestBuffers& data_out, const GuestBuffers& data_in)
        : lun_(lun),
          info_(info),
          target_(target),
          command_(command),
          out_(data_out),
          in_(data_in) {}

    Ran operator()(const TestUnitReady&) const { return Outcome::good(); }
    Ran operator()(const StartStopUnit&) const { return Outcome::good(); }
    Ran operator()(const RequestSense& request) const {
        // Sense goes back with each CHECK CONDITION (autosense): only a unit attention is
        // left to report, which this reports instead.
        const Sense sense =
            lun_ ? lun_->take_unit_attention().value_or(sense::kNoSense) : sense::kLunNotSupported;
        if (request.descriptor_format) return answer(descriptor_sense(sense));
        return answer(fixed_sense(sense));
    }
    Ran operator()(const Inquiry& request) const {
        if (!lun_) {
            if (request.vpd_page) return Outcome::check(sense::kLunNotSupported);
            return answer(inquiry_data(false));
        }
        if (!request.vpd_page) return answer(inquiry_data(true));
        return answer(vpd_page(*request.vpd_page, info_, lun_->identity()));
    }
    Ran operator()(const ModeSense& request) const {
        return answer(mode_sense_data(request, info_));
    }
    Ran operator()(const ReadCapacity& request) const {
        return answer(read_capacity_data(request.sixteen, info_));
    }
    Ran operator()(const ReportLuns& request) const {
        // This target has no well-known LUNs: their list is the empty one's 8-byte header.
        static constexpr std::array<uint8_t, 8> kNone{};
        return answer(request.well_known_only ? std::span<const uint8_t>(kNone)
                                              : target_.report_luns());
    }
    // Image operations through the request queue's IoQueue of the LUN (command_queue.h).
    Ran operator()(const Read&) const { return std::nullopt; }
    Ran operator()(const Write&) const { return std::nullopt; }
    Ran operator()(const SynchronizeCache&) const { return std::nullopt; }
    Ran operator()(const Unmap&) const {
        if (command_.transfer_bytes == 0) return Outcome::good();  // no list, nothing to do
        return lun_->unmap(out_.slice(0, command_.transfer_bytes));
    }
    Ran operator()(const WriteSame& request) const { return lun_->write_same(request, out_); }
    Ran operator()(const Verify& request) const { return lun_->verify(request, out_); }
    Ran operator()(const ModeSelect& request) const {
        return lun_->mode_select(request, out_.slice(0, command_.transfer_bytes));
    }
    Ran operator()(const ReportOpcodes& request) const {
        if (request.options == 0) return answer(all_commands_data());
        auto one = one_command_data(request);
        if (!one) return Outcome::check(one.error());
        return answer(*one);
    }

  private:
    // What the target answers itself, cut to the allocation length.
    Outcome answer(std::span<const uint8_t> data) const {
        const auto bytes = data.first(std::min<uint64_t>(data.size(), command_.transfer_bytes));
        in_.copy_from(0, bytes);
        return Outcome::good(bytes.size());
    }

    Lun* lun_;
    const LunInfo& info_;  // what the command was parsed against
    const Target& target_;
    const Command& command_;
    const GuestBuffers& out_;
    const GuestBuffers& in_;
};

// Throws unless `number` is a LUN number with no LUN in `luns`.
void check_free(const std::vector<std::shared_ptr<Lun>>& luns, uint16_t number) {
    if (number > kMaxLun)
        throw std::invalid_argument("LUN " + std::to_string(number) + " is past " +
                                    std::to_string(kMaxLun));
    if (number < luns.size() && luns[number])
        throw std::invalid_argument("LUN " + std::to_string(number) + " is given twice");
}

void place(std::vector<std::shared_ptr<Lun>>& luns, uint16_t number, std::shared_ptr<Lun> lun) {
    if (number >= luns.size()) luns.resize(number + 1u);
    luns[number] = std::move(lun);
}

}  // namespace

Target::Target(const std::vector<LunConfig>& luns) {
    for (const LunConfig& config : luns) {
        if (config.target != luns.front().target)
            throw std::invalid_argument("LUNs of targets " + std::to_string(config.target) +
                                        " and " + std::to_string(luns.front().target) +
                                        " in one target");
        check_free(luns_, config.lun);
        place(luns_, config.lun, std::make_shared<Lun>(config));
    }
    index();
}

Target::Target(Luns luns) : luns_(std::move(luns)) {
    index();
}

Target Target::with_lun(uint16_t number, std::shared_ptr<Lun> lun) const {
    check_free(luns_, number);
    Luns luns = luns_;
    place(luns, number, std::move(lun));
    return Target(std::move(luns));
}

Target Target::without_lun(uint16_t number) const {
    if (!find(number))
        throw std::invalid_argument("no LUN " + std::to_string(number) + " on this target");
    Luns luns = luns_;
    luns[number].reset();
    while (!luns.empty() && !luns.back()) luns.pop_back();
    return Target(std::move(luns));
}

void Target::index() {
    numbers_.clear();
    for (size_t i = 0; i < luns_.size(); ++i)
        if (luns_[i]) numbers_.push_back(static_cast<uint16_t>(i));
    report_luns_ = report_luns_data(numbers_);
}

std::variant<TargetOutcome, CheckedCommand> Target::check(uint16_t number,
                                                          std::span<const uint8_t> cdb,
                                                          const GuestBuffers& data_out,
                                                          const GuestBuffers& data_in) const {
    Lun* lun = find(number);
    // What a LUN answers with no disk, or with a unit attention pending (SAM-5, 5.14).
    const bool always_answered =
        !cdb.empty() && (cdb[0] == kInquiry || cdb[0] == kReportLuns || cdb[0] == kRequestSense);
    if (!lun && !always_answered)
        return TargetOutcome{Delivery::Done, Outcome::check(sense::kLunNotSupported)};
    if (lun && !always_answered) {
        if (auto attention = lun->take_unit_attention())
            return TargetOutcome{Delivery::Done, Outcome::check(*attention)};
    }
    const LunInfo info = lun ? lun->info() : LunInfo{};
    auto command = parse_cdb(cdb, info);
    if (!command) return TargetOutcome{Delivery::Done, Outcome::check(command.error())};
    if (!fits(*command, data_out, data_in)) return TargetOutcome{Delivery::Overrun, {}};
    return CheckedCommand{lun, info, std::move(command).value()};
}

std::optional<Outcome> Target::run(const CheckedCommand& checked, const GuestBuffers& data_out,
                                   const GuestBuffers& data_in) const {
    const Runner runner(checked.lun, checked.info, *this, checked.command, data_out, data_in);
    return std::visit(runner, checked.command.operation);
}

void Target::reset() const {
    for (const auto& lun : luns_) {
        if (lun) lun->reset();
    }
}

void Target::report_luns_changed(uint16_t except) const {
    for (const uint16_t number : numbers_)
        if (number != except) luns_[number]->report_luns_changed();
}

}  // namespace mvmm::devices::virtio::scsi
