#include "devices/block/qcow2/backing.h"

#include "devices/block/qcow2/engine.h"
#include "devices/block/qcow2/header.h"
#include "devices/block/qcow2/open.h"

namespace mvmm::devices::block::qcow2 {
namespace {

class RawBacking final : public BackingFile {
  public:
    RawBacking(std::unique_ptr<ImageFile> file, uint64_t size)
        : file_(std::move(file)), size_(size) {}
    uint64_t size() const override { return size_; }
    IoResult read(uint64_t offset, const GuestBuffers& into) const override {
        return file_->read(offset, into);
    }
    size_t clean_idle(std::chrono::steady_clock::time_point) override { return 0; }
    void add_stats(CacheStats&) const override {}

  private:
    std::unique_ptr<ImageFile> file_;
    uint64_t size_;
};

class Qcow2Backing final : public BackingFile {
  public:
    explicit Qcow2Backing(std::unique_ptr<Engine> engine) : engine_(std::move(engine)) {}
    uint64_t size() const override { return engine_->size(); }
    IoResult read(uint64_t offset, const GuestBuffers& into) const override {
        return engine_->read(offset, into);
    }
    size_t clean_idle(std::chrono::steady_clock::time_point now) override {
        return engine_->clean_idle(now);
    }
    void add_stats(CacheStats& stats) const override { engine_->add_stats(stats); }

  private:
    std::unique_ptr<Engine> engine_;
};

}  // namespace

std::string resolve_backing_path(const std::string& overlay_path, const std::string& name) {
    if (name.starts_with('/')) return name;
    const size_t slash = overlay_path.rfind('/');
    return slash == std::string::npos ? name : overlay_path.substr(0, slash + 1) + name;
}

std::optional<ImageFormat> parse_format(const std::string& name) {
    if (name == "qcow2") return ImageFormat::Qcow2;
    if (name == "raw") return ImageFormat::Raw;
    return std::nullopt;
}

ImageFormat probe_format(std::span<const uint8_t> first_bytes) {
    return first_bytes.size() >= 4 && load_be32(first_bytes, 0) == kMagic ? ImageFormat::Qcow2
                                                                          : ImageFormat::Raw;
}

std::unique_ptr<BackingFile> open_backing(const std::string& overlay_path, const std::string& name,
                                          const std::string& format, const Qcow2Options& options,
                                          Chain& chain) {
    const std::string path = resolve_backing_path(overlay_path, name);
    const std::string label = "disk image " + chain.top + ": backing file " + path;
    std::optional<ImageFormat> kind;
    if (!format.empty()) {
        kind = parse_format(format);
        if (!kind)
            fail_open(label, "its format '" + format + "' is not supported (qcow2 and raw are)");
    }
    uint64_t size = 0;
    auto file = open_image_file(path, label, true, chain, size);
    if (!kind) {
        uint8_t magic[4] = {};
        auto read = file->read_to_end(0, magic);
        if (!read) fail_open(label, "cannot read it: " + read.error().message());
        kind = probe_format(std::span(magic).first(*read));
    }
    if (*kind == ImageFormat::Raw) return std::make_unique<RawBacking>(std::move(file), size);
    return std::make_unique<Qcow2Backing>(
        make_engine(path, label, std::move(file), size, true, options, chain));
}

}  // namespace mvmm::devices::block::qcow2
