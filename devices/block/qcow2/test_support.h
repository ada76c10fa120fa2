// Test support for the qcow2 engine: a scratch directory removed at the end, qemu-img and
// qemu-io run as a user would, and buffers to move through an image.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/fd.h"
#include "devices/block/qcow2/file_io.h"
#include "devices/block/qcow2/qcow2_image.h"

namespace mvmm::devices::block::qcow2::testing {

// In $TMPDIR, else /dev/shm (the engine's fdatasyncs cost nothing there), else /tmp; or in
// the directory given.
class ScratchDir {
  public:
    ScratchDir() : ScratchDir(default_parent()) {}
    explicit ScratchDir(const std::string& parent) {
        std::string pattern = parent + "/mvmm-qcow2-XXXXXX";
        if (!::mkdtemp(pattern.data())) throw_errno("mkdtemp");
        path_ = pattern;
    }
    ~ScratchDir() { std::filesystem::remove_all(path_); }
    ScratchDir(const ScratchDir&) = delete;
    ScratchDir& operator=(const ScratchDir&) = delete;

    std::string file(const std::string& name) const { return path_ + "/" + name; }
    const std::string& path() const { return path_; }

  private:
    static std::string default_parent() {
        const char* tmp = std::getenv("TMPDIR");
        return tmp && *tmp ? tmp : ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    }

    std::string path_;
};

struct RunResult {
    int status;  // the exit status, -1 when it did not exit
    std::string output;
};

// Runs a shell command, its output and errors captured.
inline RunResult run(const std::string& command) {
    RunResult result{-1, ""};
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (!pipe) return result;
    std::array<char, 4096> chunk;
    while (size_t n = std::fread(chunk.data(), 1, chunk.size(), pipe))
        result.output.append(chunk.data(), n);
    const int status = ::pclose(pipe);
    if (WIFEXITED(status)) result.status = WEXITSTATUS(status);
    return result;
}

inline bool have_qemu_img() {
    return run("qemu-img --version").status == 0;
}

#define SKIP_WITHOUT_QEMU_IMG()                                   \
    if (!::mvmm::devices::block::qcow2::testing::have_qemu_img()) \
    GTEST_SKIP() << "qemu-img is not installed (Debian's qemu-utils; tools/setup installs it)"

// Runs a command that must succeed.
inline std::string must(const std::string& command) {
    const RunResult r = run(command);
    if (r.status != 0) throw std::runtime_error(command + " failed: " + r.output);
    return r.output;
}

// `size` bytes whose value depends on their offset and `seed`, so misplaced data shows.
inline std::vector<uint8_t> pattern(size_t size, uint64_t seed, uint64_t offset = 0) {
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) {
        const uint64_t at = offset + i;
        bytes[i] = static_cast<uint8_t>((at >> 9) * 31 + (at & 511) + seed * 7 + 1);
    }
    return bytes;
}

inline std::vector<uint8_t> read_bytes(const Qcow2Image& image, uint64_t offset, size_t size) {
    std::vector<uint8_t> out(size, 0xee);
    const HostBuffer buffer(out);
    if (auto read = image.read(offset, buffer.buffers()); !read)
        throw std::runtime_error("read at " + std::to_string(offset) + ": " +
                                 read.error().message());
    return out;
}

inline IoResult write_bytes(const Qcow2Image& image, uint64_t offset, std::vector<uint8_t> data) {
    const HostBuffer buffer(data);
    return image.write(offset, buffer.buffers());
}

// The bytes of a file, or of a part of it.
inline std::vector<uint8_t> file_bytes(const std::string& path, uint64_t offset = 0,
                                       uint64_t size = ~uint64_t{0}) {
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) throw_errno("open " + path);
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    std::vector<uint8_t> out(std::min(size, file_size > offset ? file_size - offset : 0));
    if (auto read = read_exact(fd.get(), offset, out); !read) throw_errno("read " + path);
    return out;
}

// Writes into a file, creating it if needed.
inline void write_file_bytes(const std::string& path, uint64_t offset,
                             std::span<const uint8_t> bytes) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    if (!fd.valid() || !write_exact(fd.get(), offset, bytes)) throw_errno("write " + path);
}

// `qemu-img check`: 0 clean, 3 leaked clusters only, 2 corruption, 1 not checked.
inline RunResult qemu_img_check(const std::string& path) {
    return run("qemu-img check -q " + path);
}

// A qcow2 image made by `qemu-img create` with `-o options`, `size` bytes.
inline std::string create_image(const ScratchDir& dir, const std::string& name,
                                const std::string& options, uint64_t size) {
    const std::string path = dir.file(name);
    must("qemu-img create -q -f qcow2 -o " + options + " " + path + " " + std::to_string(size));
    return path;
}

// The disk's bytes as `qemu-img convert` reads them.
inline std::vector<uint8_t> converted_to_raw(const std::string& path) {
    must("qemu-img convert -O raw " + path + " " + path + ".raw");
    return file_bytes(path + ".raw");
}

inline void expect_check_clean(const std::string& path) {
    const RunResult check = qemu_img_check(path);
    EXPECT_EQ(check.status, 0) << "qemu-img check " << path << ":\n" << check.output;
}

}  // namespace mvmm::devices::block::qcow2::testing
