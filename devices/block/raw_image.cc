#include "devices/block/raw_image.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "base/mapping.h"
#include "devices/block/direct_io.h"
#include "devices/block/file_size.h"

namespace mvmm::devices::block {
namespace {

IoResult errno_result(int error = errno) {
    return Unexpected{std::error_code(error, std::generic_category())};
}

template <class Call>
int retry_on_eintr(Call call) {
    int ret;
    do {
        ret = call();
    } while (ret < 0 && errno == EINTR);
    return ret;
}

// preadv/pwritev until every byte of `buffers` moved, at most kIovWindow pieces per call,
// the iovecs on the stack: the request path allocates nothing.
constexpr int kIovWindow = 64;
using VectorIo = ssize_t (*)(int, const iovec*, int, off_t);
IoResult transfer_all(VectorIo call, int fd, uint64_t offset, const GuestBuffers& buffers) {
    uint64_t moved = 0;
    while (moved < buffers.size()) {
        std::array<iovec, kIovWindow> iov;  // only the entries filled below are read
        int count = 0;
        for (const GuestBuffers::Part piece : buffers.slice(moved, buffers.size())) {
            iov[count++] = piece.as_iovec();
            if (count == kIovWindow) break;
        }
        const ssize_t done = call(fd, iov.data(), count, static_cast<off_t>(offset + moved));
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) return errno_result();
        if (done == 0) return errno_result(EIO);  // the image shrank under us
        moved += static_cast<uint64_t>(done);
    }
    return Ok{};
}

// Zeroes to write where the host cannot zero a range itself: 1 MiB of a read-only anonymous
// mapping, which reads as the kernel's zero page (no memory) and cannot be written by mistake.
// Made by the first writable image, at set-up.
GuestBuffers::Part zero_source() {
    static const Mapping zeroes = [] {
        constexpr size_t kBytes = 1 << 20;
        void* at = ::mmap(nullptr, kBytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (at == MAP_FAILED) throw_errno("mapping zeroes for write-zeroes");
        return Mapping(at, kBytes);
    }();
    return GuestBuffers::Part(zeroes.bytes());
}

[[noreturn]] void fail_open(const std::string& path, const std::string& why) {
    throw ImageError("disk image " + path + ": " + why);
}

Fd open_file(const std::string& path, bool ro, CacheMode cache) {
    // O_NONBLOCK so that a FIFO given by mistake cannot block the open.
    const int flags =
        (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | cache_open_flags(cache);
    Fd fd(::open(path.c_str(), flags));
    if (fd.valid()) return fd;
    const int error = errno;
    check_direct_open(cache, error, "disk image " + path);
    std::string why = std::string("cannot open ") + (ro ? "read-only" : "read-write") + ": " +
                      std::strerror(error);
    if (!ro && (error == EACCES || error == EROFS || error == EPERM))
        why += " (add readonly=on to attach it read-only)";
    fail_open(path, why);
}

}  // namespace

bool fallocate_unsupported(int error) {
    return error == EOPNOTSUPP || error == ENOSYS || error == ENODEV || error == EINVAL;
}

RawImage::RawImage(Opened, std::string path, Fd fd, uint64_t size, bool read_only, size_t alignment)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      size_(size),
      read_only_(read_only),
      alignment_(alignment) {}

std::unique_ptr<RawImage> RawImage::open(const std::string& path, bool ro, CacheMode cache) {
    Fd fd = open_file(path, ro, cache);
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) fail_open(path, std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail_open(path, "is a directory, not a disk image");
    if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
        fail_open(path, "is neither a regular file nor a block device");
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        fail_open(path, std::strerror(errno));

    const uint64_t size = image_file_size(fd.get(), st, "disk image " + path);
    if (size % kImageBlockSize != 0)
        fail_open(path, "is " + std::to_string(size) +
                            " bytes, not a multiple of 512; round it up with: truncate -s %512 " +
                            path);
    if (::flock(fd.get(), (ro ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0)
        fail_open(path, errno == EWOULDBLOCK
                            ? "is in use (given twice, or locked by another process)"
                            : std::string("cannot lock: ") + std::strerror(errno));
    if (!ro) zero_source();  // now, not on an I/O thread
    const size_t alignment =
        cache == CacheMode::None ? direct_io_alignment(fd.get(), st, "disk image " + path) : 1;
    return std::make_unique<RawImage>(Opened{}, path, std::move(fd), size, ro, alignment);
}

uint64_t RawImage::reread_size(uint64_t block_size) {
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) fail_open(path_, std::strerror(errno));
    const uint64_t size = image_file_size(fd_.get(), st, "disk image " + path_);
    if (size == 0 || size % block_size != 0)
        fail_open(path_, "is now " + std::to_string(size) + " bytes, not a positive multiple of " +
                             std::to_string(block_size) + "; the disk keeps " +
                             std::to_string(size_.load()) + " bytes");
    size_.store(size);
    return size;
}

RawImage::~RawImage() {
    if (read_only_) return;
    if (auto flushed = flush(); !flushed)
        spdlog::error("{}: flush at close failed: {}", path_, flushed.error().message());
}

IoResult RawImage::read(uint64_t offset, const GuestBuffers& into) const {
    return transfer_all(::preadv, fd_.get(), offset, into);
}

IoResult RawImage::write(uint64_t offset, const GuestBuffers& from) const {
    return transfer_all(::pwritev, fd_.get(), offset, from);
}

IoResult RawImage::flush() {
    if (flush_failed_.load()) return errno_result(EIO);
    const int64_t result = record_flush(::fdatasync(fd_.get()) == 0 ? 0 : -errno);
    if (result < 0) return errno_result(static_cast<int>(-result));
    return Ok{};
}

int64_t RawImage::record_flush(int64_t result) noexcept {
    if (result < 0) {
        flush_failed_.store(true);
        return result;
    }
    return flush_failed_.load() ? -EIO : 0;
}

IoResult RawImage::discard(uint64_t offset, uint64_t length) const {
    const int ret = retry_on_eintr([&] {
        return ::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset, length);
    });
    if (ret != 0 && !fallocate_unsupported(errno)) return errno_result();
    return Ok{};
}

IoResult RawImage::write_zeroes(uint64_t offset, uint64_t length, bool may_unmap) const {
    auto zero_with = [&](int mode) {
        return retry_on_eintr([&] { return ::fallocate(fd_.get(), mode, offset, length); });
    };
    // A punched hole reads back as zeroes (on block devices too: the kernel zeroes it).
    if (may_unmap && zero_with(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE) == 0) return Ok{};
    if (zero_with(FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE) == 0) return Ok{};
    if (!fallocate_unsupported(errno)) return errno_result();

    // No fallocate zeroing on this host filesystem (tmpfs, NFS...): write zeroes.
    return write_repeated(offset, length, zero_source());
}

}  // namespace mvmm::devices::block
