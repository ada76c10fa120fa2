// A minimal AML encoder: enough to describe a PCI host bridge (with its _OSC), a UART and the
// S5 sleep state in the DSDT.  Each function returns the encoded bytes of one term.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace mvmm::acpi::aml {

using Bytes = std::vector<uint8_t>;

Bytes integer(uint64_t value);                         // smallest of Zero/One/Byte/Word/DWord/QWord
Bytes string(std::string_view s);                      // StringPrefix ... NUL
Bytes eisa_id(std::string_view id);                    // e.g. "PNP0A08" as a compressed DWord
Bytes name(std::string_view seg, const Bytes& value);  // Name(SEG, value); seg is 4 chars
Bytes package(const std::vector<Bytes>& elements);
Bytes buffer(const Bytes& data);
Bytes device(std::string_view seg, const std::vector<Bytes>& body);
Bytes scope(std::string_view path, const std::vector<Bytes>& body);  // e.g. "\\_SB_"
// Method(SEG, args, NotSerialized) { body }; args 0-7.
Bytes method(std::string_view seg, uint8_t args, const std::vector<Bytes>& body);
Bytes arg(uint8_t n);                    // Arg0-Arg6
Bytes return_value(const Bytes& value);  // Return(value)

// Resource template (the data of a _CRS buffer) pieces.
namespace resource {
Bytes io(uint16_t base, uint8_t length);  // IO(Decode16, base, base, 1, length)
Bytes irq(uint8_t irq);                   // IRQNoFlags(){irq}
Bytes bus_numbers(uint16_t first, uint16_t last);
Bytes io_window(uint16_t first, uint16_t last);
Bytes memory32_window(uint32_t first, uint32_t last);
Bytes memory64_window(uint64_t first, uint64_t last);
Bytes memory32_fixed(uint32_t base, uint32_t length);
// A ResourceTemplate(): the pieces followed by an end tag, wrapped in a buffer.
Bytes template_of(const std::vector<Bytes>& pieces);
}  // namespace resource

// Concatenates terms.
Bytes join(const std::vector<Bytes>& terms);

}  // namespace mvmm::acpi::aml
