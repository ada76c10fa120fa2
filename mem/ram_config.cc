#include "mem/ram_config.h"

#include <unistd.h>

#include <cstdio>
#include <iterator>

namespace mvmm {

uint64_t base_page_size() {
    return static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

uint64_t page_size_of(HugePages hugepages) {
    switch (hugepages) {
        case HugePages::none:
            return base_page_size();
        case HugePages::size_2m:
            return 2ull << 20;
        case HugePages::size_1g:
            return 1ull << 30;
    }
    return base_page_size();
}

}  // namespace mvmm
