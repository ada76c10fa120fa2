// fuzz_scsi: virtio-scsi command requests from a driver that builds well-formed rings but says
// anything in them, through the real ScsiController (queue worker, framing, addressing, the
// targets' CDB parsing and execution on scratch images) with the request queue run on the
// fuzzer's thread.  The controller has target 0 (LUN 0 writable, 512-byte blocks; LUN 1
// read-only, 4096-byte blocks) and target 3 (LUN 0, physical blocks of 4 KiB); its state (unit
// attentions, the write cache) carries over from input to input, as a guest's would.
//
// Input (little endian): u8 flags (1: indirect chains), u32 cdb_size, u32 sense_size (the
// driver's config writes), then chains until the end (fuzz_chains.h): the first readable
// bytes are a virtio_scsi_cmd_req (u8 lun[8], u64 tag, u8 task_attr, prio, crn, then the CDB).
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>

#include "devices/virtio/scsi/controller.h"
#include "devices/virtio/test_queue_driver.h"
#include "fuzz_chains.h"
#include "fuzz_scsi_controller.h"
#include "fuzz_support.h"

namespace vt = mvmm::devices::virtio::testing;
using mvmm::devices::virtio::scsi::ScsiController;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static mvmm::fuzz::ScsiRig rig;
    mvmm::fuzz::ByteReader in({data, size});
    const bool indirect = in.take<uint8_t>() & 1;
    rig.set_layout(in.take<uint32_t>(), in.take<uint32_t>());

    vt::TestGuest guest(mvmm::fuzz::ScsiRig::kGuestBytes);
    vt::TestDriver requests(guest, mvmm::fuzz::ScsiRig::kQueueSize);
    const unsigned chains =
        mvmm::fuzz::add_chains(in, guest, requests, mvmm::fuzz::ScsiRig::kQueueSize,
                               mvmm::fuzz::ScsiRig::kGuestBytes / 2, indirect);
    if (rig.activate(guest, {}, requests.config())) {
        rig.kick(ScsiController::kFirstRequestQueue);
        while (requests.used_idx() != chains && !rig.controller.needs_reset()) rig.io.poll();
    }
    rig.controller.reset();
    rig.io.poll();
    return 0;
}
