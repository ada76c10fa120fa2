#include "bench/requests.h"

#include <stdexcept>
#include <string>

namespace mvmm::bench {

const char* to_string(DeviceKind device) {
    return device == DeviceKind::blk ? "blk" : "scsi";
}

const char* to_string(Workload workload) {
    switch (workload) {
        case Workload::rand4k:
            return "rand4k";
        case Workload::seq64k:
            return "seq64k";
        case Workload::mixed:
            return "mixed";
    }
    return "unknown";
}

uint64_t pattern_word(uint64_t offset) {
    return (offset / 8) * 0x9e37'79b9'7f4a'7c15ull ^ 0x6d76'6d6d;
}

// Word by word, no buffer: the driver side allocates nothing per request either.
void fill_pattern(const devices::virtio::testing::TestGuest& guest, GuestAddr at, uint64_t bytes,
                  uint64_t image_offset) {
    const GuestSlice data = guest.memory().slice(at, bytes).value();
    for (uint64_t word = 0; word < bytes; word += 8)
        (void)data.write_obj(word, pattern_word(image_offset + word)).value();
}

void check_pattern(const devices::virtio::testing::TestGuest& guest, GuestAddr at, uint64_t bytes,
                   uint64_t image_offset, bool every_word, const char* what) {
    const GuestSlice data = guest.memory().slice(at, bytes).value();
    const uint64_t step = every_word ? 8 : 4096;
    for (uint64_t word = 0; word < bytes; word += step) {
        if (data.read_obj<uint64_t>(word).value() != pattern_word(image_offset + word))
            throw std::runtime_error(std::string(what) + " read a wrong byte at image offset " +
                                     std::to_string(image_offset + word));
    }
}

}  // namespace mvmm::bench
