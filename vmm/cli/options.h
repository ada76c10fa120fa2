// The device options of the command line, from text to the plain, checked structs the devices
// and mem/ take (one OptionParser for all of them).  Each throws UsageError, one line.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "devices/virtio/blk/config.h"
#include "devices/virtio/scsi/config.h"
#include "mem/ram_config.h"
#include "mem/slot_pool.h"

namespace mvmm {

// A virtio-scsi controller and where it goes on PCI (as a virtio-blk disk does).
struct ScsiControllerOption {
    devices::virtio::scsi::ControllerConfig controller;
    devices::virtio::blk::DiskBus bus = devices::virtio::blk::DiskBus::RootPort;
};

// --scsi-controller id=ID[,queues=N][,queue-size=N][,bus=rootport|root][,targets=N]; its LUNs
// come from --disk.  Without queues= the controller has `default_queues` request queues (at most
// its limit); targets=N reserves targets 0 to N-1 for LUNs added while the VM runs.
ScsiControllerOption parse_scsi_controller_option(std::string_view text,
                                                  unsigned default_queues = 1);

// The disks of the command line: virtio-blk disks and the SCSI controllers that hold LUNs.
struct DiskOptions {
    std::vector<devices::virtio::blk::DiskConfig> blk;
    std::vector<ScsiControllerOption> scsi;
    // The queues a virtio-blk disk gets without queues=: one per vCPU, as QEMU gives (at most
    // the device's limit), so that each vCPU submits to a queue of its own.
    unsigned default_queues = 1;
};

// --disk path=FILE[,readonly=on][,serial=S][,queues=N][,queue-size=N][,bus=rootport|root]
// [,cache=writeback|none][,aio=io_uring|threads|sync] adds a virtio-blk disk; --disk
// path=FILE,controller=ID[,lun=N][,readonly=on][,serial=S] a LUN to the controller ID in `disks`
// (the lowest LUN number free so far without lun=).  An unknown controller, a LUN number taken or
// past the limit, or a serial another LUN has is an error. `flag` names the option in messages (the
// management socket's add-disk says "add-disk").
void add_disk_option(std::string_view text, DiskOptions& disks, std::string flag = "--disk");

// --memory SIZE or size=SIZE[,hugepages=2M|1G][,shared=on][,path=DIR][,prealloc=on]
// [,prealloc-threads=N][,prealloc-method=touch|populate][,host-node=N]
RamConfig parse_memory_option(std::string_view text);

// --request-alloc pool|malloc|calloc: where device requests in flight live.
SlotSource parse_request_alloc_option(std::string_view text);
// --cache-alloc mapping|heap: where every qcow2 disk's metadata caches keep their tables.
devices::block::qcow2::CacheAlloc parse_cache_alloc_option(std::string_view text);

}  // namespace mvmm
