# Names test host kernel addresses given as _text offsets (the freeze dump's `kernel _text+OFFSET`):
#   tools/mvmm-hostvm --script guest-images/kernel-offsets.sh -- 0xd3a20 0xa10d9b
# prints "_text+0xd3a20 = try_to_wake_up+0xe0" per offset, from the running kernel's /proc/kallsyms
# (Debian's System.map is a stub).  busybox awk has only doubles, so addresses are compared by
# their low 32 bits: the kernel's text lies within one 4 GiB window.
text=$(awk '$3 == "_text" { print $1 }' /proc/kallsyms)
for offset in "$@"; do
    awk -v text="$text" -v offset="$offset" '
        function hex(s,    i, v) {
            v = 0; s = tolower(s); sub(/^0x/, "", s)
            for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
            return v
        }
        function low32(s) { return hex(substr(s, length(s) - 7)) }
        BEGIN { want = low32(text) + hex(offset); best = -1 }
        NF == 3 && substr($1, 1, 8) == "ffffffff" {
            v = low32($1)
            if (v <= want && v > best) { best = v; name = $3 }
        }
        END { printf "_text+%s = %s+0x%x\n", offset, name, want - best }' /proc/kallsyms
done
