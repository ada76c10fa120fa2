#include "devices/virtio/scsi/mode_select.h"

#include <algorithm>
#include <array>

#include "devices/virtio/scsi/big_endian.h"
#include "devices/virtio/scsi/responses.h"

namespace mvmm::devices::virtio::scsi {
namespace {

constexpr size_t kBlockDescriptorBytes = 8;
constexpr uint8_t kWce = 0x04;  // in byte 2 of the caching page

Unexpected<Sense> fail(const Sense& sense) {
    return Unexpected{sense};
}

// One page of the list against the page this LUN reports: only the changeable bits may differ.
Result<ModeChanges, Sense> check_page(std::span<const uint8_t> sent, const LunInfo& lun,
                                      ModeChanges changes) {
    const uint8_t code = sent[0] & 0x3f;  // PS is reserved here
    if ((sent[0] & 0x40) || (code != mode_page::kCaching && code != mode_page::kControl))
        return fail(sense::kInvalidFieldInParameterList);
    Answer current, changeable;
    append_mode_pages(current, code, PageControl::Current, lun);
    append_mode_pages(changeable, code, PageControl::Changeable, lun);
    if (sent.size() != current.size() || sent[1] != current[1])
        return fail(sense::kInvalidFieldInParameterList);
    for (size_t i = 2; i < sent.size(); ++i) {
        if ((sent[i] ^ current[i]) & ~changeable[i])
            return fail(sense::kInvalidFieldInParameterList);
    }
    if (code == mode_page::kCaching) changes.write_cache = bool(sent[2] & kWce);
    return changes;
}

}  // namespace

Result<ModeChanges, Sense> parse_mode_parameters(const GuestBuffers& list, bool ten,
                                                 const LunInfo& lun) {
    if (list.size() > kMaxModeParameterBytes) return fail(sense::kInvalidFieldInParameterList);
    std::array<uint8_t, kMaxModeParameterBytes> copy;
    const auto bytes = std::span<const uint8_t>(copy).first(list.copy_to(0, copy));
    const size_t header = ten ? 8 : 4;
    if (bytes.size() < header) return fail(sense::kParameterListLength);
    const uint64_t descriptors = ten ? load_be(bytes, 6, 2) : bytes[3];
    if (descriptors != 0 && descriptors != kBlockDescriptorBytes)
        return fail(sense::kInvalidFieldInParameterList);
    if (header + descriptors > bytes.size()) return fail(sense::kParameterListLength);
    if (descriptors && load_be(bytes, header + 5, 3) != lun.block_size)
        return fail(sense::kInvalidFieldInParameterList);
    ModeChanges changes;
    for (size_t at = header + descriptors; at < bytes.size();) {
        if (bytes.size() - at < 2 || bytes.size() - at - 2 < bytes[at + 1])
            return fail(sense::kParameterListLength);
        const auto page = bytes.subspan(at, 2 + size_t{bytes[at + 1]});
        auto checked = check_page(page, lun, changes);
        if (!checked) return checked;
        changes = *checked;
        at += page.size();
    }
    return changes;
}

}  // namespace mvmm::devices::virtio::scsi
