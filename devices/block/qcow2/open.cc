#include "devices/block/qcow2/open.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "devices/block/direct_io.h"
#include "devices/block/disk_image.h"
#include "devices/block/file_size.h"

namespace mvmm::devices::block::qcow2 {
namespace {

constexpr uint64_t kHeaderPeek = 4096;  // holds the header and, mostly, the extensions
constexpr uint64_t kMaxCacheTables = uint64_t{1} << 24;

std::vector<uint8_t> read_or_fail(const ImageFile& file, uint64_t offset, uint64_t bytes,
                                  const std::string& label, const char* what) {
    std::vector<uint8_t> data(bytes);
    if (auto read = file.read(offset, data); !read)
        fail_open(label, std::string("cannot read the ") + what + ": " + read.error().message());
    return data;
}

Header read_header(const ImageFile& file, uint64_t file_size, const std::string& label) {
    std::vector<uint8_t> first =
        read_or_fail(file, 0, std::min(file_size, kHeaderPeek), label, "header");
    // The extensions and the backing file name may reach to the end of the first cluster.
    if (const auto cluster = peek_cluster_size(first); cluster && *cluster > first.size())
        first = read_or_fail(file, 0, std::min(file_size, *cluster), label, "header");
    auto header = parse_header(first, file_size);
    if (!header) fail_open(label, header.error());
    return std::move(header.value());
}

Engine::Tables read_tables(const ImageFile& file, const Header& header, uint64_t file_size,
                           const std::string& label) {
    const auto l1_bytes =
        read_or_fail(file, header.l1_table_offset, uint64_t{header.l1_size} * 8, label, "L1 table");
    auto l1 = parse_l1_table(l1_bytes, header.geometry, file_size);
    if (!l1) fail_open(label, l1.error());
    const auto refcount_bytes =
        read_or_fail(file, header.refcount_table_offset,
                     uint64_t{header.refcount_table_clusters} * header.geometry.cluster_size(),
                     label, "refcount table");
    auto refcounts = parse_refcount_table(refcount_bytes, header.geometry, file_size);
    if (!refcounts) fail_open(label, refcounts.error());
    return {std::move(l1.value()), std::move(refcounts.value())};
}

void check_options(const Qcow2Options& options, const Header& header, const std::string& label) {
    if (l2_cache_tables(options, header.geometry, header.size) > kMaxCacheTables ||
        refcount_cache_tables(options, header.geometry) > kMaxCacheTables)
        fail_open(label, "the metadata cache sizes are too big");
}

}  // namespace

void fail_open(const std::string& label, const std::string& why) {
    throw ImageError(label + ": " + why);
}

std::unique_ptr<ImageFile> open_image_file(const std::string& path, const std::string& label,
                                           bool read_only, Chain& chain, uint64_t& size) {
    // O_NONBLOCK so that a FIFO given by mistake cannot block the open.
    Fd fd(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOCTTY | O_NONBLOCK |
                                   cache_open_flags(chain.cache)));
    if (!fd.valid()) {
        const int error = errno;
        check_direct_open(chain.cache, error, label);
        std::string why = std::string("cannot open ") + (read_only ? "read-only" : "read-write") +
                          ": " + std::strerror(error);
        if (!read_only && (error == EACCES || error == EROFS || error == EPERM))
            why += " (add readonly=on to attach it read-only)";
        fail_open(label, why);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail_open(label, std::strerror(errno));
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
        fail_open(label, "is neither a regular file nor a block device");
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        fail_open(label, std::strerror(errno));

    const std::pair identity(st.st_dev, st.st_ino);
    if (std::ranges::find(chain.files, identity) != chain.files.end())
        fail_open(label, "the backing chain loops back to this file");
    if (chain.files.size() > kMaxBackingChain)
        fail_open(label, "the backing chain is deeper than " + std::to_string(kMaxBackingChain) +
                             " images");
    if (::flock(fd.get(), (read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0)
        fail_open(label, errno == EWOULDBLOCK
                             ? "is in use (given twice, or locked by another process)"
                             : std::string("cannot lock: ") + std::strerror(errno));
    if (chain.files.empty()) chain.top = path;
    chain.files.push_back(identity);
    size = image_file_size(fd.get(), st, label);
    const size_t alignment =
        chain.cache == CacheMode::None ? direct_io_alignment(fd.get(), st, label) : 1;
    chain.alignment = std::max(chain.alignment, alignment);
    try {
        return std::make_unique<ImageFile>(std::move(fd), alignment, S_ISBLK(st.st_mode));
    } catch (const std::system_error& e) {  // the bounce buffer's mapping
        fail_open(label, e.what());
    }
}

std::unique_ptr<Engine> make_engine(const std::string& path, const std::string& label,
                                    std::unique_ptr<ImageFile> file, uint64_t file_size,
                                    bool read_only, const Qcow2Options& options, Chain& chain) {
    const Header header = read_header(*file, file_size, label);
    if (auto why = unsupported_feature(header, !read_only)) fail_open(label, *why);
    check_options(options, header, label);
    Engine::Tables tables = read_tables(*file, header, file_size, label);
    std::unique_ptr<BackingFile> backing;
    if (!header.backing_file.empty())
        backing = open_backing(path, header.backing_file, header.backing_format, options, chain);

    std::unique_ptr<Engine> engine;
    try {
        engine = std::make_unique<Engine>(std::move(file), header, std::move(tables), file_size,
                                          read_only, options, std::move(backing));
    } catch (const std::system_error& e) {  // the caches' mappings
        fail_open(label, e.what());
    }
    if (!read_only) {
        if (auto why = engine->prepare_for_writes(header)) fail_open(label, *why);
    }
    return engine;
}

}  // namespace mvmm::devices::block::qcow2
