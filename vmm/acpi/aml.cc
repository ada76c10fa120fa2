#include "vmm/acpi/aml.h"

#include <stdexcept>

namespace mvmm::acpi::aml {

namespace {

constexpr uint8_t kZeroOp = 0x00, kOneOp = 0x01, kBytePrefix = 0x0a, kWordPrefix = 0x0b,
                  kDWordPrefix = 0x0c, kStringPrefix = 0x0d, kQWordPrefix = 0x0e;
constexpr uint8_t kNameOp = 0x08, kScopeOp = 0x10, kBufferOp = 0x11, kPackageOp = 0x12;
constexpr uint8_t kExtOpPrefix = 0x5b, kDeviceOp = 0x82;
constexpr uint8_t kMethodOp = 0x14, kReturnOp = 0xa4, kArg0Op = 0x68;
constexpr uint8_t kRootChar = '\\';
constexpr uint8_t kDualNamePrefix = 0x2e, kMultiNamePrefix = 0x2f;

void append_le(Bytes& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void append(Bytes& out, const Bytes& more) {
    out.insert(out.end(), more.begin(), more.end());
}

// PkgLength counts itself: 1 byte up to 63, otherwise a lead byte plus 1-3 bytes.
Bytes with_pkg_length(Bytes opcode, const Bytes& body) {
    Bytes out = std::move(opcode);
    size_t len = body.size() + 1;
    if (len <= 0x3f) {
        out.push_back(static_cast<uint8_t>(len));
    } else {
        int extra = body.size() + 2 <= 0xfff ? 1 : body.size() + 3 <= 0xfffff ? 2 : 3;
        len = body.size() + 1 + extra;
        if (len > 0xfffffff) throw std::length_error("AML package too large");
        out.push_back(static_cast<uint8_t>((extra << 6) | (len & 0xf)));
        append_le(out, len >> 4, extra);
    }
    append(out, body);
    return out;
}

void check_segment(std::string_view seg) {
    if (seg.size() != 4) throw std::invalid_argument("AML name segments have 4 characters");
}

Bytes name_string(std::string_view path) {
    Bytes out;
    if (!path.empty() && path.front() == '\\') {
        out.push_back(kRootChar);
        path.remove_prefix(1);
    }
    std::vector<std::string_view> segs;
    while (!path.empty()) {
        auto dot = path.find('.');
        segs.push_back(path.substr(0, dot));
        path = dot == std::string_view::npos ? std::string_view{} : path.substr(dot + 1);
    }
    if (segs.size() == 2) out.push_back(kDualNamePrefix);
    if (segs.size() > 2) {
        out.push_back(kMultiNamePrefix);
        out.push_back(static_cast<uint8_t>(segs.size()));
    }
    for (auto seg : segs) {
        check_segment(seg);
        out.insert(out.end(), seg.begin(), seg.end());
    }
    return out;
}

// A Word/DWord/QWord address space descriptor (ACPI 6.4, 6.4.3.5).
Bytes address_space(uint8_t tag, int width, uint8_t resource_type, uint8_t type_flags,
                    uint64_t first, uint64_t last) {
    Bytes out{tag};
    append_le(out, 3 + 5 * width, 2);  // length of what follows
    out.push_back(resource_type);
    out.push_back(0x0c);  // min and max fixed, producer
    out.push_back(type_flags);
    append_le(out, 0, width);  // granularity
    append_le(out, first, width);
    append_le(out, last, width);
    append_le(out, 0, width);  // translation offset
    append_le(out, last - first + 1, width);
    return out;
}

}  // namespace

Bytes integer(uint64_t v) {
    Bytes out;
    if (v == 0) return {kZeroOp};
    if (v == 1) return {kOneOp};
    if (v <= 0xff) {
        out = {kBytePrefix};
        append_le(out, v, 1);
    } else if (v <= 0xffff) {
        out = {kWordPrefix};
        append_le(out, v, 2);
    } else if (v <= 0xffffffff) {
        out = {kDWordPrefix};
        append_le(out, v, 4);
    } else {
        out = {kQWordPrefix};
        append_le(out, v, 8);
    }
    return out;
}

Bytes string(std::string_view s) {
    Bytes out;
    out.reserve(s.size() + 2);
    out.push_back(kStringPrefix);
    // Byte by byte: GCC 12 at -O3 warns falsely on a vector insert of a string's bytes here.
    for (const char c : s) out.push_back(static_cast<uint8_t>(c));
    out.push_back(0);
    return out;
}

Bytes eisa_id(std::string_view id) {
    if (id.size() != 7) throw std::invalid_argument("EISA IDs have 7 characters");
    auto hex = [&](size_t i) {
        char c = id[i];
        return static_cast<uint32_t>(c <= '9' ? c - '0' : c - 'A' + 10);
    };
    uint32_t v = ((id[0] - 0x40u) << 26) | ((id[1] - 0x40u) << 21) | ((id[2] - 0x40u) << 16) |
                 (hex(3) << 12) | (hex(4) << 8) | (hex(5) << 4) | hex(6);
    // Stored big-endian.
    v = __builtin_bswap32(v);
    Bytes out{kDWordPrefix};
    append_le(out, v, 4);
    return out;
}

Bytes name(std::string_view seg, const Bytes& value) {
    Bytes out{kNameOp};
    append(out, name_string(seg));
    append(out, value);
    return out;
}

Bytes package(const std::vector<Bytes>& elements) {
    Bytes body{static_cast<uint8_t>(elements.size())};
    for (const auto& e : elements) append(body, e);
    return with_pkg_length({kPackageOp}, body);
}

Bytes buffer(const Bytes& data) {
    Bytes body = integer(data.size());
    append(body, data);
    return with_pkg_length({kBufferOp}, body);
}

Bytes device(std::string_view seg, const std::vector<Bytes>& body) {
    Bytes inner = name_string(seg);
    append(inner, join(body));
    return with_pkg_length({kExtOpPrefix, kDeviceOp}, inner);
}

Bytes scope(std::string_view path, const std::vector<Bytes>& body) {
    Bytes inner = name_string(path);
    append(inner, join(body));
    return with_pkg_length({kScopeOp}, inner);
}

Bytes method(std::string_view seg, uint8_t args, const std::vector<Bytes>& body) {
    if (args > 7) throw std::invalid_argument("an AML method takes at most 7 arguments");
    Bytes inner = name_string(seg);
    inner.push_back(args);  // MethodFlags: ArgCount, not serialized, SyncLevel 0
    append(inner, join(body));
    return with_pkg_length({kMethodOp}, inner);
}

Bytes arg(uint8_t n) {
    if (n > 6) throw std::invalid_argument("AML has Arg0 to Arg6");
    return {static_cast<uint8_t>(kArg0Op + n)};
}

Bytes return_value(const Bytes& value) {
    // Built by push_back, not from {kReturnOp}: GCC 12 at -O3 warns (wrongly) that the insert
    // after a one-byte initializer list writes out of bounds.
    Bytes out;
    out.reserve(1 + value.size());
    out.push_back(kReturnOp);
    append(out, value);
    return out;
}

Bytes join(const std::vector<Bytes>& terms) {
    Bytes out;
    for (const auto& t : terms) append(out, t);
    return out;
}

namespace resource {

Bytes io(uint16_t base, uint8_t length) {
    Bytes out{0x47, 0x01};  // IO port descriptor, 16-bit decode
    append_le(out, base, 2);
    append_le(out, base, 2);
    out.push_back(1);
    out.push_back(length);
    return out;
}

Bytes irq(uint8_t irq) {
    Bytes out{0x22};
    append_le(out, 1u << irq, 2);
    return out;
}

Bytes bus_numbers(uint16_t first, uint16_t last) {
    return address_space(0x88, 2, 2, 0, first, last);
}
Bytes io_window(uint16_t first, uint16_t last) {
    return address_space(0x88, 2, 1, 3, first, last);
}
Bytes memory32_window(uint32_t first, uint32_t last) {
    return address_space(0x87, 4, 0, 1, first, last);
}
Bytes memory64_window(uint64_t first, uint64_t last) {
    return address_space(0x8a, 8, 0, 1, first, last);
}

Bytes memory32_fixed(uint32_t base, uint32_t length) {
    Bytes out{0x86, 9, 0, 1};  // Memory32Fixed, read/write
    append_le(out, base, 4);
    append_le(out, length, 4);
    return out;
}

Bytes template_of(const std::vector<Bytes>& pieces) {
    Bytes data = join(pieces);
    data.push_back(0x79);  // end tag; checksum 0 means "none"
    data.push_back(0);
    return buffer(data);
}

}  // namespace resource

}  // namespace mvmm::acpi::aml
