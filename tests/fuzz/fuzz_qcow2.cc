// fuzz_qcow2: a qcow2 image file as hostile as libFuzzer makes it, through the header, table
// and entry parsers, then through the engine: opened read-only and read at a few places, then
// opened writable and written (in place and into new clusters), discarded, zeroed, flushed and
// closed.  Opening may refuse it (ImageError); a request may fail; anything else that
// escapes, a sanitizer report or a broken parser invariant (__builtin_trap) is a finding.
//
// Input: the image file's bytes.  Seeds: small images qemu-img made (make_seeds.py).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "base/fd.h"
#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/header.h"
#include "devices/block/qcow2/qcow2_image.h"
#include "fuzz_support.h"

namespace {

using namespace mvmm::devices::block::qcow2;

void check_parsers(std::span<const uint8_t> file) {
    auto header = parse_header(file, file.size());
    if (!header) return;
    const Geometry& g = header->geometry;
    if (g.cluster_bits < kMinClusterBits || g.cluster_bits > kMaxClusterBits) __builtin_trap();
    if (g.l1_entries_for(header->size) > header->l1_size) __builtin_trap();
    const uint64_t l1_end = header->l1_table_offset + uint64_t{header->l1_size} * 8;
    if (header->l1_size != 0 && l1_end > file.size()) __builtin_trap();
    // Every 8 bytes of the file as an L2 entry and a refcount block entry.
    for (size_t at = 0; at + 8 <= file.size(); at += 8) {
        const auto entry = decode_l2_entry(load_be64(file, at), g);
        if (!entry) continue;
        if (entry->kind == ClusterKind::Data && g.offset_in_cluster(entry->host_offset) != 0)
            __builtin_trap();
        if (entry->compressed_bytes > 2 * g.cluster_size()) __builtin_trap();
    }
    std::vector<uint8_t> block(64);
    const uint64_t value = file.size() >= 8 ? load_be64(file, 0) & g.refcount_max() : 1;
    set_refcount(block, 5, g.refcount_order, value);
    if (get_refcount(block, 5, g.refcount_order) != value) __builtin_trap();
}

void request(const Qcow2Image& image, uint64_t offset, uint64_t length, bool write) {
    if (image.size() < length) return;
    offset = std::min(offset, image.size() - length);
    std::vector<uint8_t> bytes(length, 0x5a);
    const HostBuffer buffer(bytes);
    (void)(write ? image.write(offset, buffer.buffers()) : image.read(offset, buffer.buffers()));
}

void exercise_engine(const std::string& path) {
    // Two-table caches: tables are replaced and written back on every few requests.
    const Qcow2Options options{.l2_cache_size = 0, .refcount_cache_size = 0};
    try {
        const auto image = Qcow2Image::open(path, true, options);
        for (const uint64_t at : {uint64_t{0}, image->size() / 2, ~uint64_t{0}})
            request(*image, at, 4096, false);
        image->clean_idle({});
    } catch (const mvmm::devices::block::ImageError&) {
        return;  // refused at open: fine
    }
    try {
        auto image = Qcow2Image::open(path, false, options);
        request(*image, 0, 512, true);
        request(*image, 3000, 70000, true);
        request(*image, image->size() / 3, 4096, true);
        // Bounded: a hostile size would make a whole-disk discard walk millions of tables.
        const uint64_t span = std::min<uint64_t>(image->size() / 2, 1 << 20);
        (void)image->discard(0, span);
        (void)image->write_zeroes(image->size() - span, span, true);
        request(*image, 0, 8192, false);
        (void)image->flush();
        (void)image->cache_stats();
    } catch (const mvmm::devices::block::ImageError&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const mvmm::fuzz::ScratchImage file(0);
    check_parsers({data, size});
    {
        mvmm::Fd fd(::open(file.path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC));
        if (!fd.valid() || !write_exact(fd.get(), 0, std::span(data, size))) __builtin_trap();
    }
    exercise_engine(file.path());
    return 0;
}
