#include "devices/virtio/scsi/sense.h"

namespace mvmm::devices::virtio::scsi {

std::array<uint8_t, kFixedSenseBytes> fixed_sense(const Sense& sense) {
    std::array<uint8_t, kFixedSenseBytes> bytes{};
    bytes[0] = 0x70;  // current error, fixed format
    bytes[2] = static_cast<uint8_t>(sense.key);
    bytes[7] = kFixedSenseBytes - 8;  // additional sense length
    bytes[12] = sense.asc;
    bytes[13] = sense.ascq;
    return bytes;
}

std::array<uint8_t, kDescriptorSenseBytes> descriptor_sense(const Sense& sense) {
    return {0x72, static_cast<uint8_t>(sense.key), sense.asc, sense.ascq, 0, 0, 0, 0};
}

}  // namespace mvmm::devices::virtio::scsi
