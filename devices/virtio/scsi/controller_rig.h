// The device harness of controller_test.cc and hotplug_test.cc: the test plays Linux's
// virtio_scsi driver over guest memory (control, event and request queues), kicks real eventfds,
// and an I/O thread runs the controller.
#pragma once

#include "devices/virtio/scsi/controller.h"

#include <gtest/gtest.h>
#include <linux/virtio_scsi.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>

#include "devices/block/temp_image.h"
#include "devices/virtio/scsi/big_endian.h"
#include "devices/virtio/test_io.h"
#include "devices/virtio/test_queue_driver.h"

namespace mvmm::devices::virtio::scsi::testing {

namespace vt = ::mvmm::devices::virtio::testing;
namespace bt = ::mvmm::devices::block::testing;
using namespace std::chrono_literals;

inline constexpr uint64_t kFeatures = kFeatureVersion1 | kFeatureEventIdx | kFeatureIndirectDesc;

inline std::array<uint8_t, 8> address(uint16_t lun, uint8_t target = 0) {
    return {1, target, uint8_t(0x40 | lun >> 8), uint8_t(lun), 0, 0, 0, 0};
}

struct Sent {
    GuestAddr response;
    GuestAddr data;
};

class ControllerTest : public ::testing::Test {
  protected:
    // Every queue's ring has `ring_size` entries.
    void make(uint16_t request_queues = 1, SlotSource request_alloc = SlotSource::pool,
              uint16_t queue_size = kDefaultQueueSize, uint16_t ring_size = 16,
              bool second_target = false) {
        ControllerConfig config{.id = "c0",
                                .request_queues = request_queues,
                                .queue_size = queue_size,
                                .luns = {},
                                .request_alloc = request_alloc};
        config.luns.push_back({disk.path(), 0, false, "disk-0"});
        config.luns.push_back({disk2.path(), 3, true, "disk-3"});
        if (second_target) config.luns.push_back({disk3.path(), 3, false, "disk-1-3", 1});
        controller.reset();  // it holds the images' locks
        controller = std::make_unique<ScsiController>(config, io);
        drivers.clear();
        kicks.clear();
        for (uint16_t i = 0; i < controller->num_queues(); ++i) {
            drivers.push_back(std::make_unique<vt::TestDriver>(guest, ring_size));
            kicks.emplace_back();
        }
    }
    bool activate() {
        ActivateContext context{guest.memory(), features, {}, {}, interrupt};
        for (size_t i = 0; i < drivers.size(); ++i) {
            context.queues.push_back(drivers[i]->config());
            context.kicks.push_back(&kicks[i]);
        }
        if (!controller->activate(std::move(context))) return false;
        // The LUNs were just switched on: REQUEST SENSE takes each one's unit attention, so
        // that the tests' commands run.
        base.assign(drivers.size(), 0);
        if (drivers.size() > 2) {
            for (uint16_t lun : {0, 3}) send(address(lun), {0x03, 0, 0, 0, 18, 0}, {}, 18);
            wait_used(2);
            base[2] = 2;
        }
        return true;
    }
    void SetUp() override {
        make();
        ASSERT_TRUE(activate());
    }

    // A command on request queue `queue`: header, data-out; response, data-in.
    // With `kick` false the command waits in the ring until the next kick.
    Sent send(std::array<uint8_t, 8> lun, std::initializer_list<uint8_t> cdb,
              std::span<const uint8_t> out = {}, uint32_t in = 0, size_t queue = 2,
              uint64_t tag = 0, bool kick = true) {
        virtio_scsi_cmd_req header{};
        std::memcpy(header.lun, lun.data(), 8);
        header.tag = tag;
        std::copy(cdb.begin(), cdb.end(), header.cdb);
        const GuestAddr request = guest.alloc(sizeof header);
        guest.write(request, std::span(reinterpret_cast<const uint8_t*>(&header), sizeof header));
        std::vector<vt::TestDriver::Buffer> chain{{request, uint32_t(sizeof header), false}};
        Sent sent{guest.alloc(sizeof(virtio_scsi_cmd_resp)), {}};
        if (!out.empty()) {
            sent.data = guest.alloc(out.size() + data_misalignment) + data_misalignment;
            guest.write(sent.data, out);
            chain.push_back({sent.data, uint32_t(out.size()), false});
        }
        chain.push_back({sent.response, uint32_t(sizeof(virtio_scsi_cmd_resp)), true});
        if (in > 0) {
            sent.data = guest.alloc(in + data_misalignment) + data_misalignment;
            chain.push_back({sent.data, in, true});
        }
        drivers[queue]->add_chain(chain);
        if (kick) kicks[queue].signal();
        return sent;
    }
    // `count` chains used on `queue` since activate() took the unit attentions.
    void wait_used(uint16_t count, size_t queue = 2) {
        const uint16_t expected = base.empty() ? count : uint16_t(base[queue] + count);
        ASSERT_TRUE(vt::eventually([&] { return drivers[queue]->used_idx() == expected; }))
            << "queue " << queue << " used " << drivers[queue]->used_idx();
    }
    // Until the control queue's TMF waits for the request queues: commands kicked after this
    // were queued before it.
    void wait_for_tmf() {
        ASSERT_TRUE(vt::eventually([&] { return controller->task_function_waiting(); }));
    }
    uint16_t used_since_activation(size_t queue) const {
        return uint16_t(drivers[queue]->used_idx() - base[queue]);
    }
    // A task management function on the control queue; its response's address.
    GuestAddr tmf(uint32_t subtype, std::array<uint8_t, 8> lun, uint64_t tag = 0) {
        virtio_scsi_ctrl_tmf_req request{};
        request.type = VIRTIO_SCSI_T_TMF;
        request.subtype = subtype;
        std::memcpy(request.lun, lun.data(), 8);
        request.tag = tag;
        return control(request, sizeof(virtio_scsi_ctrl_tmf_resp));
    }
    template <class Request>
    GuestAddr control(const Request& request, size_t response_size) {
        const GuestAddr in = guest.alloc(sizeof request), out = guest.alloc(response_size);
        guest.write(in, std::span(reinterpret_cast<const uint8_t*>(&request), sizeof request));
        const vt::TestDriver::Buffer chain[] = {{in, uint32_t(sizeof request), false},
                                                {out, uint32_t(response_size), true}};
        drivers[0]->add_chain(chain);
        kicks[0].signal();
        return out;
    }
    virtio_scsi_cmd_resp response_of(const Sent& sent) const {
        virtio_scsi_cmd_resp response{};
        auto bytes = guest.read(sent.response, sizeof response);
        std::memcpy(&response, bytes.data(), sizeof response);
        return response;
    }

    uint64_t features = kFeatures;   // what the driver takes at activate()
    uint64_t data_misalignment = 0;  // send()'s data buffers start this far past an alignment
    vt::TestGuest guest{1 << 20};
    bt::TempImage disk{64 * 512, 0xaa};
    bt::TempImage disk2{8 * 512, 0xbb};
    bt::TempImage disk3{16 * 512, 0xcc};
    boost::asio::io_context io;
    vt::IoThread io_thread{io};
    vt::FakeInterrupt interrupt;
    std::unique_ptr<ScsiController> controller;
    std::vector<std::unique_ptr<vt::TestDriver>> drivers;
    std::deque<EventFd> kicks;
    std::vector<uint16_t> base;  // per queue: the chains activate() used
};

}  // namespace mvmm::devices::virtio::scsi::testing
