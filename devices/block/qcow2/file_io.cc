#include "devices/block/qcow2/file_io.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

#include "devices/block/direct_io.h"

namespace mvmm::devices::block::qcow2 {
namespace {

constexpr int kIovWindow = 64;  // iovecs per call, on the stack

template <class Call>
IoResult transfer(Call call, uint64_t offset, uint64_t size) {
    uint64_t moved = 0;
    while (moved < size) {
        const ssize_t done = call(moved, offset + moved);
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) return errno_result(errno);
        if (done == 0) return io_error();  // past the end of the file
        moved += static_cast<uint64_t>(done);
    }
    return Ok{};
}

// Fills `iov` with the pieces of `streams` from byte `skip` of their concatenation.
int gather(std::initializer_list<GuestBuffers> streams, uint64_t skip,
           std::array<iovec, kIovWindow>& iov) {
    int count = 0;
    for (const GuestBuffers& stream : streams) {
        if (skip >= stream.size()) {
            skip -= stream.size();
            continue;
        }
        for (const GuestBuffers::Part piece : stream.slice(skip, stream.size())) {
            iov[count++] = piece.as_iovec();
            if (count == kIovWindow) return count;
        }
        skip = 0;
    }
    return count;
}

uint64_t total_size(std::initializer_list<GuestBuffers> streams) {
    uint64_t size = 0;
    for (const GuestBuffers& stream : streams) size += stream.size();
    return size;
}

// The bytes of `streams` from byte `skip` of their concatenation into `out`.
void copy_out(std::initializer_list<GuestBuffers> streams, uint64_t skip, std::span<uint8_t> out) {
    for (const GuestBuffers& stream : streams) {
        if (out.empty()) return;
        if (skip >= stream.size()) {
            skip -= stream.size();
            continue;
        }
        const uint64_t n = std::min<uint64_t>(stream.size() - skip, out.size());
        stream.copy_to(skip, out.first(n));
        out = out.subspan(n);
        skip = 0;
    }
}

// The bounce buffer of an O_DIRECT file: a multiple of any alignment it takes.
constexpr size_t kBounceBytes = 256 * 1024;

// Reads `into` from `offset` (with O_DIRECT: aligned blocks) until it is full or the file
// ends (no more bytes, or a short read that stops off a block boundary): how many it read.
Result<uint64_t, std::error_code> read_blocks(int fd, uint64_t offset, std::span<uint8_t> into,
                                              size_t alignment) {
    uint64_t done = 0;
    while (done < into.size()) {
        const ssize_t n =
            ::pread(fd, into.data() + done, into.size() - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Unexpected{std::error_code(errno, std::generic_category())};
        done += static_cast<uint64_t>(n);
        if (n == 0 || done % alignment != 0) break;
    }
    return done;
}

}  // namespace

IoResult errno_result(int error) {
    return Unexpected{std::error_code(error, std::generic_category())};
}

IoResult read_exact(int fd, uint64_t offset, std::span<uint8_t> into) {
    return transfer(
        [&](uint64_t done, uint64_t at) {
            return ::pread(fd, into.data() + done, into.size() - done, static_cast<off_t>(at));
        },
        offset, into.size());
}

IoResult write_exact(int fd, uint64_t offset, std::span<const uint8_t> from) {
    return transfer(
        [&](uint64_t done, uint64_t at) {
            return ::pwrite(fd, from.data() + done, from.size() - done, static_cast<off_t>(at));
        },
        offset, from.size());
}

IoResult read_exact(int fd, uint64_t offset, const GuestBuffers& into) {
    return transfer(
        [&](uint64_t done, uint64_t at) {
            std::array<iovec, kIovWindow> iov;  // only the entries gathered are read
            const int count = gather({into}, done, iov);
            return ::preadv(fd, iov.data(), count, static_cast<off_t>(at));
        },
        offset, into.size());
}

IoResult write_exact(int fd, uint64_t offset, std::initializer_list<GuestBuffers> pieces) {
    return transfer(
        [&](uint64_t done, uint64_t at) {
            std::array<iovec, kIovWindow> iov;
            const int count = gather(pieces, done, iov);
            return ::pwritev(fd, iov.data(), count, static_cast<off_t>(at));
        },
        offset, total_size(pieces));
}

IoResult sync_data(int fd) {
    if (::fdatasync(fd) != 0) return errno_result(errno);
    return Ok{};
}

ImageFile::ImageFile(Fd fd, size_t alignment, bool fixed_size)
    : fd_(std::move(fd)), alignment_(alignment), fixed_size_(fixed_size) {
    if (alignment_ == 1) return;
    if (alignment_ > kBounceBytes / 2 || (alignment_ & (alignment_ - 1)) != 0)
        throw std::system_error(EINVAL, std::generic_category(), "O_DIRECT alignment");
    bounce_ = Mapping::anonymous(kBounceBytes, MAP_NORESERVE);
}

bool ImageFile::direct_ok(uint64_t offset,
                          std::initializer_list<GuestBuffers> pieces) const noexcept {
    if (alignment_ == 1) return true;
    return offset % alignment_ == 0 && std::ranges::all_of(pieces, [&](const GuestBuffers& p) {
               return aligned(p, alignment_);
           });
}

IoResult ImageFile::read(uint64_t offset, std::span<uint8_t> into) const {
    const HostBuffer buffer(into);
    return read(offset, buffer.buffers());
}

IoResult ImageFile::read(uint64_t offset, const GuestBuffers& into) const {
    if (direct_ok(offset, {into})) return read_exact(fd_.get(), offset, into);
    auto got = bounce_read(offset, into);
    if (!got) return Unexpected{got.error()};
    return *got == into.size() ? IoResult(Ok{}) : io_error();  // past the end of the file
}

Result<uint64_t, std::error_code> ImageFile::read_to_end(uint64_t offset,
                                                         std::span<uint8_t> into) const {
    const HostBuffer buffer(into);
    if (direct_ok(offset, {buffer.buffers()}))
        return read_blocks(fd_.get(), offset, into, alignment_);
    return bounce_read(offset, buffer.buffers());
}

IoResult ImageFile::write(uint64_t offset, std::span<const uint8_t> from) const {
    // Only read from: HostBuffer's parts are writable views.
    const HostBuffer buffer({const_cast<uint8_t*>(from.data()), from.size()});
    return write(offset, {buffer.buffers()});
}

IoResult ImageFile::write(uint64_t offset, std::initializer_list<GuestBuffers> pieces) const {
    if (direct_ok(offset, pieces)) return write_exact(fd_.get(), offset, pieces);
    return bounce_write(offset, pieces);
}

Result<uint64_t, std::error_code> ImageFile::bounce_read(uint64_t offset,
                                                         const GuestBuffers& into) const {
    const std::lock_guard lock(bounce_mutex_);
    const std::span<uint8_t> bounce = bounce_.bytes();
    uint64_t done = 0;
    while (done < into.size()) {
        const uint64_t start = (offset + done) / alignment_ * alignment_;
        const uint64_t skip = offset + done - start;
        const uint64_t want = std::min<uint64_t>(into.size() - done, bounce.size() - skip);
        const uint64_t blocks = (skip + want + alignment_ - 1) / alignment_ * alignment_;
        auto got = read_blocks(fd_.get(), start, bounce.first(blocks), alignment_);
        if (!got) return Unexpected{got.error()};
        const uint64_t useful = *got > skip ? std::min(*got - skip, want) : 0;
        into.copy_from(done, bounce.subspan(skip, useful));
        done += useful;
        if (useful < want) break;  // the end of the file
    }
    return done;
}

IoResult ImageFile::bounce_write(uint64_t offset,
                                 std::initializer_list<GuestBuffers> pieces) const {
    const std::lock_guard lock(bounce_mutex_);
    const std::span<uint8_t> bounce = bounce_.bytes();
    const uint64_t size = total_size(pieces);
    for (uint64_t done = 0; done < size;) {
        const uint64_t start = (offset + done) / alignment_ * alignment_;
        const uint64_t skip = offset + done - start;
        const uint64_t want = std::min<uint64_t>(size - done, bounce.size() - skip);
        const uint64_t blocks = (skip + want + alignment_ - 1) / alignment_ * alignment_;
        if (skip != 0 || want != blocks) {  // what shares its first or last block stays
            auto got = read_blocks(fd_.get(), start, bounce.first(blocks), alignment_);
            if (!got) return Unexpected{got.error()};
            std::fill(bounce.begin() + static_cast<ptrdiff_t>(*got),
                      bounce.begin() + static_cast<ptrdiff_t>(blocks), 0);  // past the end
        }
        copy_out(pieces, done, bounce.subspan(skip, want));
        if (auto written = write_exact(fd_.get(), start, bounce.first(blocks)); !written)
            return written;
        done += want;
    }
    return Ok{};
}

void fill_zero(const GuestBuffers& into) {
    static constexpr std::array<uint8_t, 4096> kZeroes{};
    for (uint64_t done = 0; done < into.size();)
        done += into.copy_from(
            done, std::span(kZeroes).first(std::min<uint64_t>(kZeroes.size(), into.size() - done)));
}

}  // namespace mvmm::devices::block::qcow2
