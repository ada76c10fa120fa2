// mvmm-io: the I/O workload of the default guest's io-bench script (guest-images/README.md).
//
//   mvmm-io fill FILE SIZE_MIB
//       makes FILE SIZE_MIB MiB long, every 8-byte word holding kMagic ^ its byte offset
//   mvmm-io read DEVICE randread|seqread BLOCK_BYTES DEPTH SECONDS [buffered]
//       reads DEVICE with O_DIRECT (buffered: through the page cache, where Linux's native AIO
//       completes each read as it is submitted) for SECONDS, BLOCK_BYTES at a time at random
//       block-aligned offsets or in sequence (wrapping at the end), DEPTH reads in flight (Linux
//       native AIO), then waits for those in flight. Checks every word read against the pattern;
//       prints
//         workload=randread block_bytes=4096 depth=32 ios=N seconds=S iops=N mib_s=X
//         mismatches=0 errors=0
//       (one line) and exits 0 when no read failed or mismatched, 1 otherwise; 2: bad arguments.
// Built statically by guest-images/build (the guest has no shared libraries), and by meson
// for its unit test (mvmm_io_test.py).
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr uint64_t kMagic = 0x4d564d4d2d494f00;  // "MVMM-IO\0"
constexpr size_t kAlign = 4096;
constexpr uint64_t kMib = 1 << 20;

std::runtime_error sys_error(const std::string& what) {
    return std::runtime_error(what + ": " + std::strerror(errno));
}

class Fd {
  public:
    Fd(const char* path, int flags) : fd_(::open(path, flags | O_CLOEXEC, 0644)) {
        if (fd_ < 0) throw sys_error(std::string("cannot open ") + path);
    }
    ~Fd() { ::close(fd_); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

// Linux native AIO through its system calls (no libaio in the guest).
class AioContext {
  public:
    explicit AioContext(unsigned depth) {
        if (::syscall(SYS_io_setup, depth, &ctx_) != 0) throw sys_error("io_setup");
    }
    ~AioContext() { ::syscall(SYS_io_destroy, ctx_); }
    AioContext(const AioContext&) = delete;
    AioContext& operator=(const AioContext&) = delete;

    void submit(std::span<iocb*> batch) {
        long done = ::syscall(SYS_io_submit, ctx_, static_cast<long>(batch.size()), batch.data());
        if (done != static_cast<long>(batch.size())) throw sys_error("io_submit");
    }
    std::span<io_event> wait(std::span<io_event> events) {
        long got;
        do {
            got = ::syscall(SYS_io_getevents, ctx_, 1L, static_cast<long>(events.size()),
                            events.data(), nullptr);
        } while (got < 0 && errno == EINTR);
        if (got < 0) throw sys_error("io_getevents");
        return events.first(static_cast<size_t>(got));
    }

  private:
    aio_context_t ctx_ = 0;
};

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};

std::unique_ptr<uint64_t[], FreeDeleter> aligned_words(size_t bytes) {
    void* p = std::aligned_alloc(kAlign, bytes);
    if (!p) throw std::runtime_error("out of memory");
    return std::unique_ptr<uint64_t[], FreeDeleter>(static_cast<uint64_t*>(p));
}

uint64_t number(std::string_view text, uint64_t min, uint64_t max, const char* what) {
    char* end = nullptr;
    const std::string s(text);
    errno = 0;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0 || v < min || v > max)
        throw std::invalid_argument(std::string(what) + " must be a number from " +
                                    std::to_string(min) + " to " + std::to_string(max));
    return v;
}

uint64_t device_bytes(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) throw sys_error("fstat");
    if (!S_ISBLK(st.st_mode)) return static_cast<uint64_t>(st.st_size);
    uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) throw sys_error("BLKGETSIZE64");
    return bytes;
}

void fill(const char* path, uint64_t mib) {
    Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC);
    auto chunk = aligned_words(kMib);
    constexpr size_t kWords = kMib / sizeof(uint64_t);
    for (uint64_t at = 0; at < mib * kMib; at += kMib) {
        for (size_t i = 0; i < kWords; ++i) chunk[i] = kMagic ^ (at + i * sizeof(uint64_t));
        if (::pwrite(fd.get(), chunk.get(), kMib, static_cast<off_t>(at)) != kMib)
            throw sys_error(std::string("cannot write ") + path);
    }
}

// Where the reads go: random block-aligned offsets (xorshift64*, fixed seed) or in sequence.
class Offsets {
  public:
    Offsets(bool random, uint64_t blocks, uint64_t block_bytes)
        : random_(random), blocks_(blocks), block_bytes_(block_bytes) {}
    uint64_t next() {
        if (!random_) return (next_++ % blocks_) * block_bytes_;
        state_ ^= state_ >> 12;
        state_ ^= state_ << 25;
        state_ ^= state_ >> 27;
        return (state_ * 0x2545f4914f6cdd1dULL % blocks_) * block_bytes_;
    }

  private:
    bool random_;
    uint64_t blocks_, block_bytes_, next_ = 0, state_ = 0x9e3779b97f4a7c15ULL;
};

struct Totals {
    uint64_t ios = 0, mismatches = 0, errors = 0;
};

uint64_t mismatched_words(const uint64_t* words, uint64_t offset, uint64_t bytes) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < bytes / sizeof(uint64_t); ++i)
        bad += words[i] != (kMagic ^ (offset + i * sizeof(uint64_t)));
    return bad;
}

// One slot per read in flight: its control block and its buffer.
struct Slot {
    iocb cb{};
    uint64_t* buffer = nullptr;
};

void prepare(Slot& slot, int fd, uint64_t offset, uint64_t block_bytes) {
    slot.cb = iocb{};
    slot.cb.aio_lio_opcode = IOCB_CMD_PREAD;
    slot.cb.aio_fildes = static_cast<uint32_t>(fd);
    slot.cb.aio_buf = reinterpret_cast<uint64_t>(slot.buffer);
    slot.cb.aio_nbytes = block_bytes;
    slot.cb.aio_offset = static_cast<int64_t>(offset);
    slot.cb.aio_data = reinterpret_cast<uint64_t>(&slot);
}

Totals run_reads(int fd, Offsets& offsets, uint64_t block_bytes, unsigned depth,
                 std::chrono::steady_clock::time_point deadline) {
    AioContext aio(depth);
    auto buffers = aligned_words(block_bytes * depth);
    std::vector<Slot> slots(depth);
    std::vector<iocb*> batch;
    for (unsigned i = 0; i < depth; ++i) {
        slots[i].buffer = buffers.get() + i * block_bytes / sizeof(uint64_t);
        prepare(slots[i], fd, offsets.next(), block_bytes);
        batch.push_back(&slots[i].cb);
    }
    aio.submit(batch);
    std::vector<io_event> events(depth);
    Totals totals;
    for (unsigned in_flight = depth; in_flight > 0;) {
        batch.clear();
        const bool more = std::chrono::steady_clock::now() < deadline;
        for (const io_event& e : aio.wait(events)) {
            Slot& slot = *reinterpret_cast<Slot*>(e.data);
            ++totals.ios;
            if (e.res != static_cast<int64_t>(block_bytes))
                ++totals.errors;
            else
                totals.mismatches +=
                    mismatched_words(slot.buffer, static_cast<uint64_t>(slot.cb.aio_offset),
                                     block_bytes) != 0;
            if (!more) {
                --in_flight;
                continue;
            }
            prepare(slot, fd, offsets.next(), block_bytes);
            batch.push_back(&slot.cb);
        }
        if (!batch.empty()) aio.submit(batch);
    }
    return totals;
}

int read_workload(std::span<char*> args) {
    const std::string_view workload = args[1];
    if (workload != "randread" && workload != "seqread")
        throw std::invalid_argument("the workload is randread or seqread");
    const uint64_t block = number(args[2], 512, 16 * kMib, "BLOCK_BYTES");
    const auto depth = static_cast<unsigned>(number(args[3], 1, 1024, "DEPTH"));
    const uint64_t seconds = number(args[4], 1, 3600, "SECONDS");
    if (block % 512 != 0) throw std::invalid_argument("BLOCK_BYTES must be a multiple of 512");
    bool buffered = false;
    if (args.size() > 5) {
        if (std::string_view(args[5]) != "buffered")
            throw std::invalid_argument("the last word, if any, is buffered");
        buffered = true;
    }
    Fd fd(args[0], O_RDONLY | (buffered ? 0 : O_DIRECT));
    const uint64_t blocks = device_bytes(fd.get()) / block;
    if (blocks < depth) throw std::invalid_argument(std::string(args[0]) + " is too small");
    Offsets offsets(workload == "randread", blocks, block);
    const auto start = std::chrono::steady_clock::now();
    const Totals t =
        run_reads(fd.get(), offsets, block, depth, start + std::chrono::seconds(seconds));
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double iops = static_cast<double>(t.ios - t.errors) / elapsed;
    std::printf(
        "workload=%s block_bytes=%llu depth=%u ios=%llu seconds=%.3f iops=%.0f mib_s=%.1f "
        "mismatches=%llu errors=%llu\n",
        std::string(workload).c_str(), static_cast<unsigned long long>(block), depth,
        static_cast<unsigned long long>(t.ios), elapsed, iops,
        iops * static_cast<double>(block) / kMib, static_cast<unsigned long long>(t.mismatches),
        static_cast<unsigned long long>(t.errors));
    return t.mismatches == 0 && t.errors == 0 ? 0 : 1;
}

constexpr const char* kUsage =
    "usage: mvmm-io fill FILE SIZE_MIB\n"
    "       mvmm-io read DEVICE randread|seqread BLOCK_BYTES DEPTH SECONDS [buffered]\n";

}  // namespace

int main(int argc, char** argv) {
    const std::span<char*> args(argv, static_cast<size_t>(argc));
    try {
        if (argc == 4 && std::string_view(args[1]) == "fill") {
            fill(args[2], number(args[3], 1, 1 << 20, "SIZE_MIB"));
            return 0;
        }
        if ((argc == 7 || argc == 8) && std::string_view(args[1]) == "read")
            return read_workload(args.subspan(2));
        std::fputs(kUsage, stderr);
        return 2;
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "mvmm-io: %s\n%s", e.what(), kUsage);
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mvmm-io: %s\n", e.what());
        return 1;
    }
}
