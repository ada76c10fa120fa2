// fuzz_scsi_control: the virtio-scsi control queue (task management functions, asynchronous
// notification queries) from a driver that says anything in it, while the request queue holds
// commands of its own: through the real ScsiController, whose control queue runs on its own
// thread and whose TMFs wait for the request queue, run here on the fuzzer's thread.  Every
// control chain must come back, whatever it asked (a TMF that never returned is a hang).
//
// Input (little endian): u8 request chains n, then n request chains and the control chains
// (fuzz_chains.h).  A control chain's readable bytes start with u32 type: 0 a TMF
// (virtio_scsi_ctrl_tmf_req: u32 subtype, u8 lun[8], u64 tag), 1 and 2 an AN query or
// subscription (u8 lun[8], u32 events).
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
    const unsigned request_chains = in.take<uint8_t>();

    vt::TestGuest guest(mvmm::fuzz::ScsiRig::kGuestBytes);
    vt::TestDriver requests(guest, mvmm::fuzz::ScsiRig::kQueueSize);
    vt::TestDriver control(guest, mvmm::fuzz::ScsiRig::kQueueSize);
    const auto budget = mvmm::fuzz::ScsiRig::kGuestBytes / 4;
    mvmm::fuzz::ByteReader request_input(in.rest());
    // The request chains take what they need off the front; the control chains the rest.
    const unsigned sent =
        mvmm::fuzz::add_chains(request_input, guest, requests, mvmm::fuzz::ScsiRig::kQueueSize,
                               budget, false, request_chains);
    const unsigned control_chains = mvmm::fuzz::add_chains(
        request_input, guest, control, mvmm::fuzz::ScsiRig::kQueueSize, budget, false);
    if (rig.activate(guest, control.config(), requests.config())) {
        rig.kick(ScsiController::kFirstRequestQueue);
        rig.kick(ScsiController::kControlQueue);
        while ((control.used_idx() != control_chains || requests.used_idx() != sent) &&
               !rig.controller.needs_reset())
            rig.io.poll();
    }
    rig.controller.reset();
    rig.io.poll();
    return 0;
}
