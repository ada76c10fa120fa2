// Builders of small well-formed and malformed kernel images for tests.
#pragma once

#include <asm/bootparam.h>

#include <cstring>
#include <vector>

namespace mvmm::boot {

// A minimal well-formed bzImage: 4 setup sectors + boot sector, then `kernel_bytes`.
inline std::vector<uint8_t> make_bzimage(size_t kernel_bytes = 4096) {
    std::vector<uint8_t> file(5 * 512 + kernel_bytes, 0x90);
    setup_header hdr{};
    hdr.setup_sects = 4;
    hdr.boot_flag = 0xAA55;
    hdr.header = 0x53726448;
    hdr.version = 0x020f;
    hdr.loadflags = LOADED_HIGH;
    hdr.xloadflags = XLF_KERNEL_64;
    hdr.syssize = static_cast<uint32_t>(kernel_bytes / 16);
    hdr.initrd_addr_max = 0x7fffffff;
    hdr.cmdline_size = 2047;
    hdr.pref_address = 0x1000000;
    hdr.init_size = 0x800000;
    std::memcpy(file.data() + 0x1f1, &hdr, sizeof hdr);
    return file;
}

inline setup_header& header_of(std::vector<uint8_t>& file) {
    return *reinterpret_cast<setup_header*>(file.data() + 0x1f1);
}

}  // namespace mvmm::boot
