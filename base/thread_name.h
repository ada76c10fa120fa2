// Names the calling thread, as ps, top and /proc/<pid>/task/*/comm show it (QEMU's "CPU 0/KVM"),
// so that a profile or a per-thread CPU count (boot-bench --io) tells vCPUs, I/O threads and
// helpers apart.  Linux keeps 15 bytes; longer names are cut.
#pragma once

#include <pthread.h>

#include <string>
#include <string_view>

namespace mvmm {

inline void name_this_thread(std::string_view name) {
    const std::string kept(name.substr(0, 15));
    ::pthread_setname_np(::pthread_self(), kept.c_str());  // fails only for a name too long
}

}  // namespace mvmm
