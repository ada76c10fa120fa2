#include "vmm/boot/bzimage.h"

#include <algorithm>
#include <cstring>

#include "mem/ram_config.h"
#include "vmm/layout.h"

namespace mvmm::boot {

namespace {

constexpr uint32_t kHeaderMagic = 0x53726448;  // "HdrS"
constexpr uint16_t kBootFlag = 0xAA55;
constexpr uint16_t kMinProtocol = 0x020c;  // 2.12: xloadflags with XLF_KERNEL_64
constexpr size_t kSetupHeaderOffset = 0x1f1;
constexpr uint64_t kPageSize = 4096;

template <class T>
void write_or_throw(const GuestMemory& memory, GuestAddr addr, std::span<const T> data,
                    const char* what) {
    auto bytes = std::as_bytes(data);
    auto r =
        memory.write_bytes(addr, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    if (!r) throw BootError(std::string(what) + " does not fit in guest RAM");
}

}  // namespace

BzImage parse_bzimage(std::span<const uint8_t> file) {
    if (file.size() < kSetupHeaderOffset + sizeof(setup_header))
        throw BootError("the kernel file is too small to be a bzImage");
    setup_header hdr;
    std::memcpy(&hdr, file.data() + kSetupHeaderOffset, sizeof hdr);
    if (hdr.header != kHeaderMagic || hdr.boot_flag != kBootFlag)
        throw BootError("the kernel file is not a bzImage (no Linux boot header)");
    if (hdr.version < kMinProtocol)
        throw BootError("the bzImage uses boot protocol " + std::to_string(hdr.version >> 8) + "." +
                        std::to_string(hdr.version & 0xff) + "; mvmm needs 2.12 or later");
    if (!(hdr.xloadflags & XLF_KERNEL_64))
        throw BootError("the bzImage has no 64-bit entry point (is it a 32-bit kernel?)");
    if (!(hdr.loadflags & LOADED_HIGH))
        throw BootError("the bzImage is not a high-loaded (bzImage) kernel");
    size_t setup_sects = hdr.setup_sects == 0 ? 4 : hdr.setup_sects;
    size_t kernel_offset = (setup_sects + 1) * 512;
    if (kernel_offset >= file.size())
        throw BootError("the bzImage is truncated: no protected-mode kernel after the setup code");
    if (hdr.syssize != 0 && uint64_t{hdr.syssize} * 16 > file.size() - kernel_offset)
        throw BootError("the bzImage is truncated: the header promises " +
                        std::to_string(uint64_t{hdr.syssize} * 16) + " kernel bytes");
    return {hdr, file.subspan(kernel_offset)};
}

std::vector<E820Entry> build_e820(std::span<const std::pair<uint64_t, uint64_t>> ram) {
    std::vector<E820Entry> map;
    for (auto [base, size] : ram) {
        if (base == 0) {
            // The real-mode area: RAM up to the EBDA, the legacy hole up to 1 MiB reserved.
            map.push_back({0, layout::kEbdaStart.value(), kE820Ram});
            map.push_back(
                {layout::kEbdaStart.value(), 0xa0000 - layout::kEbdaStart.value(), kE820Reserved});
            map.push_back({layout::kAcpiStart.value(),
                           layout::kHighMemStart.value() - layout::kAcpiStart.value(),
                           kE820Reserved});
            if (size > layout::kHighMemStart.value())
                map.push_back({layout::kHighMemStart.value(), size - layout::kHighMemStart.value(),
                               kE820Ram});
        } else {
            map.push_back({base, size, kE820Ram});
        }
    }
    // PCIe ECAM must be reserved or Linux refuses to use MMCONFIG.
    map.push_back({layout::kEcamStart.value(), layout::kEcamSize, kE820Reserved});
    std::sort(map.begin(), map.end(), [](auto& a, auto& b) { return a.addr < b.addr; });
    return map;
}

GuestAddr place_initrd(const BzImage& image, uint64_t initrd_bytes, uint64_t low_ram_end) {
    const setup_header& hdr = image.header;
    const uint64_t limit = std::min<uint64_t>(low_ram_end, uint64_t{hdr.initrd_addr_max} + 1);
    // A relocatable kernel decompresses itself at its preferred address (16 MiB).
    const uint64_t kernel_start =
        std::max<uint64_t>(hdr.pref_address, layout::kHighMemStart.value());
    const uint64_t kernel_size = std::max<uint64_t>(hdr.init_size, image.kernel.size());
    uint64_t kernel_end = 0;
    if (__builtin_add_overflow(kernel_start, kernel_size, &kernel_end))
        throw BootError("the bzImage's preferred address and init size add up past 2^64");
    if (initrd_bytes > limit || ((limit - initrd_bytes) & ~(kPageSize - 1)) < kernel_end)
        throw BootError("the initrd (" + format_size(initrd_bytes) +
                        ") does not fit in guest RAM between the kernel's end at " +
                        format_size(kernel_end) + " and " + format_size(limit) +
                        "; give the guest more memory");
    return GuestAddr((limit - initrd_bytes) & ~(kPageSize - 1));
}

void check_cmdline(const BzImage& image, std::string_view cmdline) {
    const uint64_t accepted =
        std::min<uint64_t>(layout::kCmdlineMax - 1, image.header.cmdline_size);
    if (cmdline.size() > accepted)
        throw BootError("the kernel command line is " + std::to_string(cmdline.size()) +
                        " bytes, longer than the kernel accepts (" + std::to_string(accepted) +
                        " bytes)");
}

BootInfo load_linux(const GuestMemory& memory, const BootInputs& in) {
    const setup_header& hdr = in.image.header;
    const GuestAddr kernel_addr = layout::kHighMemStart;
    write_or_throw(memory, kernel_addr, in.image.kernel, "the kernel");

    check_cmdline(in.image, in.cmdline);
    std::vector<char> cmdline(in.cmdline.begin(), in.cmdline.end());
    cmdline.push_back('\0');
    write_or_throw(memory, layout::kCmdline, std::span<const char>(cmdline), "the command line");

    boot_params params{};
    params.hdr = hdr;
    params.hdr.type_of_loader = 0xff;  // "undefined" loader
    params.hdr.loadflags |= CAN_USE_HEAP | KEEP_SEGMENTS;
    params.hdr.loadflags &= ~QUIET_FLAG;
    params.hdr.heap_end_ptr = 0xfe00;
    params.hdr.cmd_line_ptr = static_cast<uint32_t>(layout::kCmdline.value());
    params.hdr.vid_mode = 0xffff;  // "normal"
    params.acpi_rsdp_addr = in.rsdp_addr;

    GuestAddr initrd_addr{0};
    if (!in.initrd.empty()) {
        initrd_addr =
            place_initrd(in.image, in.initrd.size(), memory.regions().front().end().value());
        write_or_throw(memory, initrd_addr, in.initrd, "the initrd");
        params.hdr.ramdisk_image = static_cast<uint32_t>(initrd_addr.value());
        params.hdr.ramdisk_size = static_cast<uint32_t>(in.initrd.size());
    }

    if (in.e820.size() > E820_MAX_ENTRIES_ZEROPAGE) throw BootError("too many e820 entries");
    for (size_t i = 0; i < in.e820.size(); ++i)
        params.e820_table[i] = {in.e820[i].addr, in.e820[i].size, in.e820[i].type};
    params.e820_entries = static_cast<uint8_t>(in.e820.size());

    auto r = memory.write(layout::kZeroPage, params);
    if (!r) throw BootError("the zero page does not fit in guest RAM");
    // The 64-bit entry point is 0x200 bytes into the protected-mode kernel.
    return {kernel_addr + 0x200, layout::kZeroPage, initrd_addr};
}

}  // namespace mvmm::boot
