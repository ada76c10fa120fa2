// The machine's disks by id, and their hot-plug over the management socket (issue 27).
//
//   add-disk {--disk's keys}   a virtio-blk disk into the first free root port's slot (the
//                              --root-ports N reserve them), parsed by --disk's own parser;
//                              the guest (pciehp) sees the link come up and scans it at once.
//   remove-disk {id}           presses the slot's attention button and returns; pciehp blinks
//                              the power indicator for 5 s (echo 0 > /sys/bus/pci/slots/N/power
//                              skips them), unbinds the driver, which flushes and resets the
//                              device, and powers the slot off.  That is the release: the
//                              function leaves the bus (its BARs leave the address spaces: a
//                              flat-view rebuild, published with RCU) and comes here.
//   query-disks                {disks: [{id, name, port, state, hotplugged}, then the SCSI
//                               LUNs' {id, name, controller, target, lun, state, hotplugged}],
//                               slots: [...], added, released, release_ns, bar_regions: PCI
//                               BARs in the MMIO address space now, mapped or not}
// add-disk with controller= and remove-disk of a LUN's id ("c0:0:3") add and remove a SCSI LUN
// on a running controller instead (vmm/lun_hotplug.h).
// The releaser thread then destroys the released device: its queues stop once their requests in
// flight finish, the image is flushed (fdatasync) and closed, the MSI-X vectors' GSIs and irqfds
// are freed.  The disk leaves query-disks when that is done, so a client that polls it sees
// the files closed.  A bad request (an unknown id, a busy or empty port, no free port, a path
// that does not open, a key --disk does not know) is an exception and changes nothing.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "devices/pci/host_bridge.h"
#include "mem/guest_memory.h"
#include "mem/slot_pool.h"
#include "vmm/board.h"
#include "vmm/lun_hotplug.h"
#include "vmm/vcpu/vcpu_diagnostics.h"

namespace mvmm {

// add-disk's arguments as --disk text: strings as given, true/false as on/off, whole numbers
// in decimal.  Throws std::invalid_argument for another kind of value or a ',' in one (it
// would split the item).
std::string disk_option_text(const nlohmann::json& arguments);

class DiskHotplug {
  public:
    struct Context {
        devices::pci::PciHostBridge& pci;
        const MmioSpace& mmio;  // where the BARs are: query-disks counts them
        devices::Platform& platform;
        const GuestMemory& memory;
        boost::asio::io_context& io;  // the devices' I/O threads
        SlotSource request_alloc;
        unsigned default_queues;  // a hot-added disk's queues without queues= (one per vCPU)
        VcpuDiagnostics& diagnostics;
        // A hot-added disk's image has this cache-clean-interval (not 0).
        std::function<void(std::chrono::seconds)> cache_clean_interval;
    };

    // Takes over the board's disks; registers for the functions the guest releases.  Every
    // reference in `context` must outlive this.
    DiskHotplug(Context context, const std::vector<DiskView>& boot_disks);
    // Finishes destroying what the guest released, then joins the releaser thread.
    ~DiskHotplug();
    DiskHotplug(const DiskHotplug&) = delete;
    DiskHotplug& operator=(const DiskHotplug&) = delete;

    nlohmann::json add(const nlohmann::json& arguments);
    nlohmann::json remove(const nlohmann::json& arguments);
    nlohmann::json query() const;
    // resize-disk: the present disks opened from `path` read their image's size again (see
    // DiskResizer); nullopt when none was.
    std::optional<uint64_t> resize(const std::string& path);

    // The disks present now, for the exit figures.
    std::vector<DiskView> disks() const;
    // Calls `visit` with the image of every disk not being closed, in disk order, under the
    // lock the releaser takes before it closes one: no image goes while it is visited.
    void for_each_image(const std::function<void(devices::block::DiskImage&)>& visit) const;

  private:
    enum class State { Present, Removing, Closing };
    struct Entry {
        DiskView view;
        bool hotplugged = false;
        State state = State::Present;
    };
    struct Released {
        uint8_t port;
        std::shared_ptr<devices::pci::PciFunction> function;
    };

    static const char* state_name(State state);
    uint8_t free_port() const;  // throws std::runtime_error when none is
    void serve_releases(std::stop_token stop);
    void finish_release(Released released);

    Context context_;
    mutable std::mutex mutex_;  // taken before the bridge's lock, never under it
    std::vector<Entry> disks_;
    unsigned next_index_;  // of the next hot-added disk's id and name
    uint64_t added_ = 0;
    uint64_t released_ = 0;
    std::chrono::nanoseconds release_time_{};  // destroying released devices
    LunHotplug luns_;

    // The bridge's unplug handler pushes here (under the bridge's lock, hence its own mutex).
    std::mutex queue_mutex_;
    std::condition_variable_any queue_cv_;
    std::vector<Released> queue_;
    std::jthread releaser_;  // last: stops first
};

}  // namespace mvmm
