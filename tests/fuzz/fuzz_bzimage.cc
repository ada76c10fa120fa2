// fuzz_bzimage: a kernel file, parsed by the real bzImage code and loaded with an initrd and a
// command line into 64 MiB of guest RAM; then the initrd must lie in RAM, page aligned, above
// the kernel and the area it decompresses into (a wrapped pref_address + init_size once put it
// over the kernel).  place_initrd() alone is checked the same way for other RAM sizes.
//
// Input (little endian): u32 initrd size (at most 4 MiB), u32 end of low RAM for place_initrd,
// u16 n, n bytes of command line, then the kernel file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "vmm/boot/bzimage.h"
#include "vmm/layout.h"

namespace {

using namespace mvmm;

constexpr uint64_t kRamBytes = 64 << 20;
constexpr uint32_t kMaxInitrdBytes = 4 << 20;
constexpr uint64_t kPageSize = 4096;

GuestMemory make_memory() {
    std::vector<RamRegion> regions;
    regions.push_back({GuestAddr(0), Mapping::anonymous(kRamBytes)});
    return GuestMemory(std::move(regions));
}

// Where the initrd went must be below `ram_end` and clear of the kernel, computed without
// wrap-around.
void check_placement(const boot::BzImage& image, GuestAddr initrd, uint64_t size,
                     uint64_t ram_end) {
    const auto& hdr = image.header;
    const unsigned __int128 kernel_end =
        static_cast<unsigned __int128>(std::max<uint64_t>(hdr.pref_address, 1 << 20)) +
        std::max<uint64_t>(hdr.init_size, image.kernel.size());
    const bool fits = initrd.value() % kPageSize == 0 && initrd.value() >= kernel_end &&
                      size <= ram_end && initrd.value() <= ram_end - size &&
                      initrd.value() + size - 1 <= hdr.initrd_addr_max;
    if (!fits) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const GuestMemory memory = make_memory();
    static const std::vector<uint8_t> initrd_bytes(kMaxInitrdBytes, 0x1d);
    fuzz::ByteReader in({data, size});
    const uint32_t initrd_size = std::min(in.take<uint32_t>(), kMaxInitrdBytes);
    const uint32_t low_ram_end = in.take<uint32_t>();
    const auto cmdline = in.take_bytes(in.take<uint16_t>());
    const auto kernel_file = in.rest();

    try {
        const auto image = boot::parse_bzimage(kernel_file);
        try {
            if (initrd_size != 0)
                check_placement(image, boot::place_initrd(image, initrd_size, low_ram_end),
                                initrd_size, low_ram_end);
        } catch (const boot::BootError&) {
        }
        const std::span initrd(initrd_bytes.data(), initrd_size);
        const auto e820 =
            boot::build_e820(std::vector<std::pair<uint64_t, uint64_t>>{{0, kRamBytes}});
        const auto info = boot::load_linux(
            memory, {image, initrd, std::string(cmdline.begin(), cmdline.end()), e820, 0xe0000});
        if (initrd_size != 0) check_placement(image, info.initrd, initrd_size, kRamBytes);
    } catch (const boot::BootError&) {
    }
    return 0;
}
