// The device options of the command line, from text to the plain, checked structs the devices
// and mem/ take (one OptionParser for all of them).  Each throws UsageError, one line.
#pragma once

#include <string_view>

#include "devices/virtio/blk/config.h"
#include "mem/ram_config.h"

namespace mvmm {

// --disk path=FILE[,readonly=on][,serial=S][,queues=N][,bus=rootport|root]
devices::virtio::blk::DiskConfig parse_disk_option(std::string_view text);

// --memory SIZE or size=SIZE[,hugepages=2M|1G][,shared=on][,path=DIR][,prealloc=on]
// [,prealloc-threads=N][,prealloc-method=touch|populate][,host-node=N]
RamConfig parse_memory_option(std::string_view text);

}  // namespace mvmm
