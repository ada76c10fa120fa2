"""The kernel modules an image loads at boot: the ones its list names and what they depend on, in load order, as
kmod's modprobe resolves them from depmod's files in the extracted kernel package."""

import gzip
import lzma
import re
from pathlib import Path

from mvmmtools.images import BuildError, run


def module_name(path):
    base = Path(path).name
    base = re.sub(r"\.ko(\.(xz|gz|zst))?$", "", base)
    return base.replace("-", "_")


def read_module_list(path):
    """A modules file: one module per line, '# comments', and modprobe.d-like 'options NAME k=v ...' lines.

    Returns (wanted names, {name: params})."""
    wanted, params = [], {}
    for line in Path(path).read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if words[0] == "options":
            if len(words) < 3:
                raise BuildError(f"{path}: 'options' needs a module and parameters: {line!r}")
            params[module_name(words[1])] = " ".join(words[2:])
        else:
            wanted += [module_name(w) for w in words]
    return wanted, params


def resolve_modules(kroot, release, wanted):
    """Module files for `wanted` and everything they depend on, in load order: `modprobe --show-depends` on the
    kernel package extracted at kroot (depmod ran there), without this host's modprobe.d (-C /dev/null). Modules
    built into the kernel are skipped. Returns [(name, path relative to lib/modules/RELEASE)]."""
    if not wanted:
        return []
    mdir = Path(kroot) / "lib/modules" / release
    out = run(["modprobe", "--show-depends", "-a", "-C", "/dev/null", "-d", str(kroot), "-S", release, *wanted])
    order = {}
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["insmod"]:  # the others: "builtin NAME"
            order.setdefault(module_name(words[1]), str(Path(words[1]).relative_to(mdir)))
    return list(order.items())


def module_bytes(path):
    """The module's ELF bytes: compressed modules are decompressed here because busybox insmod may not."""
    data = Path(path).read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".zst":
        raise BuildError(f"{path}: zstd-compressed modules are not supported (no zstd in Python's stdlib)")
    return data


def add_modules(archive, kroot, release, modules_file):
    """Copies the resolved modules to /lib/modules/ and writes /lib/modules/load-order ('file params' lines)."""
    wanted, params = read_module_list(modules_file)
    lines = []
    for name, rel in resolve_modules(kroot, release, wanted):
        src = Path(kroot) / "lib/modules" / release / rel
        dest = f"{name}.ko"
        archive.file(f"/lib/modules/{dest}", module_bytes(src))
        lines.append(f"{dest} {params.get(name, '')}".rstrip())
    archive.file("/lib/modules/load-order", ("\n".join(lines) + "\n").encode())
