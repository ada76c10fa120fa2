#include "devices/block/qcow2/compressed.h"

#include <zlib.h>

namespace mvmm::devices::block::qcow2 {
namespace {

constexpr int kWindowBits = -12;  // raw deflate, 4 KiB window: QEMU's qcow2_zlib_compress

class Inflater {
  public:
    Inflater() { ok_ = ::inflateInit2(&stream_, kWindowBits) == Z_OK; }
    ~Inflater() {
        if (ok_) ::inflateEnd(&stream_);
    }
    Inflater(const Inflater&) = delete;
    Inflater& operator=(const Inflater&) = delete;

    bool ok() const { return ok_; }
    z_stream& stream() { return stream_; }

  private:
    z_stream stream_{};
    bool ok_ = false;
};

}  // namespace

IoResult inflate_cluster(std::span<const uint8_t> compressed, std::span<uint8_t> cluster) {
    Inflater inflater;
    if (!inflater.ok()) return io_error(std::errc::not_enough_memory);
    z_stream& s = inflater.stream();
    s.next_in = const_cast<Bytef*>(compressed.data());  // zlib does not write it
    s.avail_in = static_cast<uInt>(compressed.size());
    s.next_out = cluster.data();
    s.avail_out = static_cast<uInt>(cluster.size());
    const int status = ::inflate(&s, Z_FINISH);
    if (s.avail_out != 0) return io_error();  // short, or not deflate data
    if (status == Z_STREAM_END) return Ok{};
    // The cluster is full but the stream did not say it ended: one more byte must not come.
    uint8_t beyond;
    s.next_out = &beyond;
    s.avail_out = 1;
    ::inflate(&s, Z_FINISH);
    return s.avail_out == 0 ? io_error() : IoResult(Ok{});
}

}  // namespace mvmm::devices::block::qcow2
