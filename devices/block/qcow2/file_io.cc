#include "devices/block/qcow2/file_io.h"

#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <cerrno>

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

Result<uint64_t, std::error_code> read_to_end(int fd, uint64_t offset, std::span<uint8_t> into) {
    uint64_t done = 0;
    while (done < into.size()) {
        const ssize_t n =
            ::pread(fd, into.data() + done, into.size() - done, static_cast<off_t>(offset + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Unexpected{std::error_code(errno, std::generic_category())};
        if (n == 0) break;
        done += static_cast<uint64_t>(n);
    }
    return done;
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

void fill_zero(const GuestBuffers& into) {
    static constexpr std::array<uint8_t, 4096> kZeroes{};
    for (uint64_t done = 0; done < into.size();)
        done += into.copy_from(
            done, std::span(kZeroes).first(std::min<uint64_t>(kZeroes.size(), into.size() - done)));
}

}  // namespace mvmm::devices::block::qcow2
