// SCSI LUNs added to and removed from running controllers over the management socket
// (issue 27); vmm/disk_hotplug.h hands it the requests that name a controller or a LUN.
//
//   add-disk {path, controller=ID[, target=T][, lun=N], --disk's other LUN keys}
//       parsed by --disk's own parser against the LUNs present now; the controller publishes
//       its new LUN table and tells the guest (a RESCAN event, Linux adds /dev/sdX), and the
//       target's other LUNs report REPORTED LUNS DATA HAS CHANGED.  A target past the
//       controller's max_target (fixed at start) is refused.
//   remove-disk {id: "ID:T:L"}
//       the LUN leaves the table at once and the guest is told (a REMOVED event); its image is
//       flushed and closed (on the controller's closer thread) when its last command completes,
//       until then query-disks lists it as "closing".
// Every LUN, from the command line or added, has the id "CONTROLLER:TARGET:LUN".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/block/disk_image.h"
#include "devices/virtio/scsi/controller.h"

namespace mvmm {

class LunHotplug {
  public:
    struct Controller {
        std::string id;
        devices::virtio::scsi::ScsiController* scsi;  // outlives this
    };

    // `cache_clean_interval` is told a hot-added image's cache-clean-interval (not 0).
    LunHotplug(std::vector<Controller> controllers,
               std::function<void(std::chrono::seconds)> cache_clean_interval);

    // Whether add-disk's arguments describe a LUN, or remove-disk's id names one.
    static bool describes_lun(const nlohmann::json& arguments);
    static bool names_lun(const std::string& id);

    // Throw std::invalid_argument or std::runtime_error (an image) and change nothing.
    nlohmann::json add(const nlohmann::json& arguments);
    nlohmann::json remove(const std::string& id);
    // [{id, name, controller, target, lun, state: present|closing, hotplugged}]
    nlohmann::json query() const;
    // Every LUN's image present now, each open until `visit` returns.
    void for_each_image(const std::function<void(devices::block::DiskImage&)>& visit) const;

  private:
    struct Closing {
        std::string id;
        std::weak_ptr<const void> lun;  // expires once its image is closed
    };
    const Controller& controller(const std::string& id) const;

    const std::vector<Controller> controllers_;
    std::function<void(std::chrono::seconds)> cache_clean_interval_;
    mutable std::mutex mutex_;             // serializes changes and guards what follows
    std::vector<std::string> hotplugged_;  // ids of the LUNs added here
    mutable std::vector<Closing> closing_;
};

}  // namespace mvmm
