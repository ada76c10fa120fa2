// The `key=value[,key=value]` syntax shared by --disk, --memory and --scsi-controller (after
// Cloud Hypervisor's option_parser): an option names its keys, parse() splits the text, and
// the typed getters check each value as it is read.  Every mistake is a UsageError of one
// line naming the option, the text given, the item and what was expected:
//   --disk 'path=a.img,readonly=yes': readonly=yes: expected on or off
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mvmm {

// What a size without a suffix counts.
enum class SizeUnit { MiB, Bytes };

class OptionParser {
  public:
    // `flag` is how the user wrote the option ("--disk"), `keys` the keys it knows.  With a
    // `bare_key`, a first item without '=' is that key's value ("--memory 512M").
    OptionParser(std::string flag, std::vector<std::string_view> keys,
                 std::string_view bare_key = {});

    // Splits `text` into items (none when it is empty); an empty item, an item without '=', an
    // unknown key or a key given twice is a UsageError.
    void parse(std::string_view text);

    bool has(std::string_view key) const { return values_.contains(key); }
    // The value as given; nullopt when the key is absent.
    std::optional<std::string_view> get(std::string_view key) const;
    // A value that must be given and must not be empty.
    std::string_view required(std::string_view key) const;
    // on/off (also yes/no, true/false).
    bool toggle(std::string_view key, bool fallback) const;
    // A decimal number in [min, max].
    std::optional<uint64_t> number(std::string_view key, uint64_t min, uint64_t max) const;
    // A power of two in [min, max].
    std::optional<uint64_t> power_of_two(std::string_view key, uint64_t min, uint64_t max) const;
    // A size with a K, M, G or T suffix (powers of 1024); a bare number is `bare`.
    std::optional<uint64_t> size(std::string_view key, SizeUnit bare = SizeUnit::MiB) const;
    // One of `choices`' names.
    template <class T>
    T choice(std::string_view key, std::initializer_list<std::pair<std::string_view, T>> choices,
             T fallback) const {
        const auto value = get(key);
        if (!value) return fallback;
        std::string names;
        for (const auto& [name, result] : choices) {
            if (name == *value) return result;
            names += (names.empty() ? "" : ", ") + std::string(name);
        }
        fail(key, "expected one of " + names);
    }

    // Throws the UsageError for `key`'s item.
    [[noreturn]] void fail(std::string_view key, std::string_view why) const;
    // Throws a UsageError about the option as a whole.
    [[noreturn]] void fail(std::string_view why) const;

  private:
    // A decimal number in [min, max] that `accept` takes; else "expected `kind` from min to max".
    std::optional<uint64_t> number_where(std::string_view key, uint64_t min, uint64_t max,
                                         std::string_view kind, bool (*accept)(uint64_t)) const;

    std::string flag_;
    std::vector<std::string_view> keys_;
    std::string_view bare_key_;
    struct Item {
        std::string text;   // as given, for messages: "readonly=yes", or "512M" for a bare key
        std::string value;  // "yes"
    };
    std::string text_;
    std::map<std::string, Item, std::less<>> values_;
};

// "512M" -> 536870912; a bare number is MiB, as in QEMU's -m (or bytes, as in QEMU's -drive
// sizes).  Throws UsageError naming `text`.
uint64_t parse_size(std::string_view text, SizeUnit bare = SizeUnit::MiB);

}  // namespace mvmm
