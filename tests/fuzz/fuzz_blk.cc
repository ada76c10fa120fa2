// fuzz_blk: virtio-blk requests from a driver that builds well-formed rings but says anything
// in them, through the real BlkDevice (queue worker, request parsing, execution on a scratch
// image) with the io_context run on the fuzzer's thread.
//
// Input (little endian):
//   u64 driver features (ANDed with what the device offers), u8 flags (1: read-only disk,
//   2: indirect chains),
//   then chains until the end (fuzz_chains.h; the request header is the first 16 readable
//   bytes: u32 type, u32 reserved, u64 sector).
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/fd.h"
#include "devices/virtio/blk/blk_device.h"
#include "devices/virtio/test_queue_driver.h"
#include "fuzz_chains.h"
#include "fuzz_support.h"

namespace {

using namespace mvmm;
using namespace mvmm::devices::virtio;
namespace vt = mvmm::devices::virtio::testing;

constexpr uint64_t kDiskBytes = 1 << 20;
constexpr uint16_t kQueueSize = 64;
constexpr uint64_t kGuestBytes = 1 << 20;
// What the buffers may take of guest RAM; the rest holds the rings and indirect tables.
constexpr uint64_t kBufferBudget = kGuestBytes / 2;

class CountingInterrupt final : public Interrupt {
  public:
    void notify_queue(uint16_t) override { ++queue_interrupts; }
    void notify_config() override { ++config_interrupts; }
    unsigned queue_interrupts = 0;
    unsigned config_interrupts = 0;
};

// Two disks on scratch images, one read-only, sharing the fuzzer's io_context.
struct Disks {
    boost::asio::io_context io;
    fuzz::ScratchImage writable_image{kDiskBytes};
    fuzz::ScratchImage read_only_image{kDiskBytes};
    blk::BlkDevice writable{{.path = writable_image.path()}, io};
    blk::BlkDevice read_only{{.path = read_only_image.path(), .read_only = true}, io};
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static Disks disks;
    fuzz::ByteReader in({data, size});
    const auto features = in.take<uint64_t>();
    const auto flags = in.take<uint8_t>();
    blk::BlkDevice& disk = (flags & 1) ? disks.read_only : disks.writable;

    vt::TestGuest guest(kGuestBytes);
    vt::TestDriver driver(guest, kQueueSize);
    fuzz::add_chains(in, guest, driver, kQueueSize, kBufferBudget, flags & 2);

    CountingInterrupt interrupt;
    EventFd kick;
    disks.io.restart();
    if (disk.activate(
            {guest.memory(), features & disk.features(), {driver.config()}, {&kick}, interrupt})) {
        kick.signal();
        while (disks.io.poll() > 0) {
        }
    }
    disk.reset();
    disks.io.poll();
    return 0;
}
