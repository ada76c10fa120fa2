#include "vmm/boot/bzimage.h"

#include <gtest/gtest.h>

#include <cstring>

#include "vmm/boot/fake_bzimage.h"
#include "vmm/layout.h"

namespace mvmm::boot {
namespace {

GuestMemory make_memory(uint64_t size) {
    std::vector<RamRegion> regions;
    regions.push_back({GuestAddr(0), Mapping::anonymous(size)});
    return GuestMemory(std::move(regions));
}

TEST(BzImage, ParsesAWellFormedImage) {
    auto file = make_bzimage(8192);
    auto image = parse_bzimage(file);
    EXPECT_EQ(image.kernel.size(), 8192u);
    EXPECT_EQ(image.kernel.data(), file.data() + 5 * 512);
}

TEST(BzImage, ZeroSetupSectorsMeansFour) {
    auto file = make_bzimage();
    header_of(file).setup_sects = 0;
    EXPECT_EQ(parse_bzimage(file).kernel.data(), file.data() + 5 * 512);
}

TEST(BzImage, RejectsMalformedHeaders) {
    auto expect_error = [](std::vector<uint8_t> file, const char* fragment) {
        try {
            parse_bzimage(file);
            ADD_FAILURE() << "accepted: " << fragment;
        } catch (const BootError& e) {
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
        }
    };
    expect_error(std::vector<uint8_t>(100), "too small");
    struct Corruption {
        void (*corrupt)(setup_header&);
        const char* fragment;
    };
    const Corruption corruptions[] = {
        {[](setup_header& h) { h.header = 0; }, "not a bzImage"},
        {[](setup_header& h) { h.boot_flag = 0; }, "not a bzImage"},
        {[](setup_header& h) { h.version = 0x0206; }, "2.12"},
        {[](setup_header& h) { h.xloadflags = 0; }, "64-bit"},
        {[](setup_header& h) { h.loadflags = 0; }, "high-loaded"},
    };
    for (const auto& c : corruptions) {
        auto file = make_bzimage();
        c.corrupt(header_of(file));
        expect_error(file, c.fragment);
    }
}

TEST(BzImage, RejectsTruncatedImages) {
    auto file = make_bzimage(4096);
    file.resize(5 * 512);  // setup only
    EXPECT_THROW(parse_bzimage(file), BootError);
    auto short_kernel = make_bzimage(4096);
    short_kernel.resize(short_kernel.size() - 100);  // fewer bytes than syssize promises
    EXPECT_THROW(parse_bzimage(short_kernel), BootError);
}

TEST(LoadLinux, PlacesKernelCmdlineInitrdAndZeroPage) {
    auto file = make_bzimage();
    auto image = parse_bzimage(file);
    auto memory = make_memory(256 << 20);
    std::vector<uint8_t> initrd(10000, 0xab);
    auto e820 = build_e820(std::vector<std::pair<uint64_t, uint64_t>>{{0, 256 << 20}});
    auto info = load_linux(memory, {image, initrd, "console=ttyS0", e820, 0xe0000});

    EXPECT_EQ(info.entry, layout::kHighMemStart + 0x200);
    EXPECT_EQ(info.initrd.value() % 4096, 0u);
    EXPECT_LE(info.initrd.value() + initrd.size(), uint64_t{256} << 20);
    EXPECT_EQ(*memory.read<uint8_t>(info.initrd), 0xab);
    EXPECT_EQ(*memory.read<uint8_t>(layout::kHighMemStart), 0x90);

    auto params = *memory.read<boot_params>(info.zero_page);
    EXPECT_EQ(params.hdr.ramdisk_image, info.initrd.value());
    EXPECT_EQ(params.hdr.ramdisk_size, initrd.size());
    EXPECT_EQ(params.hdr.cmd_line_ptr, layout::kCmdline.value());
    EXPECT_EQ(params.hdr.type_of_loader, 0xff);
    EXPECT_EQ(params.acpi_rsdp_addr, 0xe0000u);
    EXPECT_EQ(params.e820_entries, e820.size());
    char cmdline[14];
    ASSERT_TRUE(memory.read_bytes(layout::kCmdline, {reinterpret_cast<uint8_t*>(cmdline), 14}));
    EXPECT_STREQ(cmdline, "console=ttyS0");
}

TEST(LoadLinux, RefusesAnInitrdThatDoesNotFit) {
    auto file = make_bzimage();
    auto image = parse_bzimage(file);
    auto memory = make_memory(32 << 20);
    std::vector<uint8_t> initrd(20 << 20);
    auto e820 = build_e820(std::vector<std::pair<uint64_t, uint64_t>>{{0, 32 << 20}});
    EXPECT_THROW(load_linux(memory, {image, initrd, "", e820, 0}), BootError);
}

TEST(PlaceInitrd, GoesAboveTheDecompressedKernelAndBelowTheLimits) {
    auto file = make_bzimage();
    header_of(file).initrd_addr_max = (64 << 20) - 1;
    const auto image = parse_bzimage(file);
    const auto at = place_initrd(image, 5000, 256 << 20);
    EXPECT_EQ(at.value(), (64u << 20) - 8192);
    EXPECT_THROW(place_initrd(image, (64 << 20) - (0x1000000 + 0x800000) + 1, 256 << 20),
                 BootError);
}

TEST(PlaceInitrd, HeaderValuesThatWrapAroundAreRefused) {
    // pref_address + init_size wraps past 2^64: without the check the kernel "ends" at a few
    // MiB and the initrd lands on top of it.
    auto file = make_bzimage();
    header_of(file).pref_address = ~uint64_t{0} - 0xfff;
    const auto image = parse_bzimage(file);
    EXPECT_THROW(place_initrd(image, 4096, 256 << 20), BootError);
    auto memory = make_memory(256 << 20);
    std::vector<uint8_t> initrd(4096);
    EXPECT_THROW(load_linux(memory, {image, initrd, "", {}, 0}), BootError);
    header_of(file).pref_address = 512 << 20;  // above all RAM
    EXPECT_THROW(place_initrd(parse_bzimage(file), 4096, 256 << 20), BootError);
}

TEST(LoadLinux, RefusesATooLongCommandLine) {
    auto file = make_bzimage();
    auto image = parse_bzimage(file);
    auto memory = make_memory(64 << 20);
    EXPECT_THROW(load_linux(memory, {image, {}, std::string(3000, 'x'), {}, 0}), BootError);
}

TEST(E820, ReservesLegacyAreasAndEcam) {
    auto map = build_e820(std::vector<std::pair<uint64_t, uint64_t>>{
        {0, layout::kLowRamMaxEnd.value()}, {layout::k4GiB.value(), 1ull << 30}});
    ASSERT_GE(map.size(), 5u);
    for (size_t i = 1; i < map.size(); ++i)
        EXPECT_GE(map[i].addr, map[i - 1].addr + map[i - 1].size) << "entries overlap or unsorted";
    auto type_at = [&](uint64_t addr) {
        for (auto& e : map)
            if (addr >= e.addr && addr < e.addr + e.size) return int(e.type);
        return -1;
    };
    EXPECT_EQ(type_at(0x1000), kE820Ram);
    EXPECT_EQ(type_at(0x9fc00), kE820Reserved);
    EXPECT_EQ(type_at(0xb8000), -1);  // the VGA hole is neither
    EXPECT_EQ(type_at(0xf0000), kE820Reserved);
    EXPECT_EQ(type_at(0x100000), kE820Ram);
    EXPECT_EQ(type_at(layout::kEcamStart.value()), kE820Reserved);
    EXPECT_EQ(type_at(layout::kPciMmio32Start.value()), -1);
    EXPECT_EQ(type_at(layout::k4GiB.value() + 4096), kE820Ram);
}

TEST(Layout, SplitsRamAroundThePciHole) {
    auto small = layout::ram_ranges(512 << 20);
    ASSERT_EQ(small.size(), 1u);
    EXPECT_EQ(small[0].size, uint64_t{512} << 20);
    auto big = layout::ram_ranges(4ull << 30);
    ASSERT_EQ(big.size(), 2u);
    EXPECT_EQ(big[0].size, layout::kLowRamMaxEnd.value());
    EXPECT_EQ(big[1].base, layout::k4GiB);
    EXPECT_EQ(big[0].size + big[1].size, 4ull << 30);
    EXPECT_GE(layout::pci_mmio64_start(4ull << 30).value(), big[1].base.value() + big[1].size);
}

}  // namespace
}  // namespace mvmm::boot
