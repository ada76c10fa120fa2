"""newc cpio archives, the format the kernel unpacks an initramfs from, written by libarchive's bsdtar from an
mtree(5) manifest: every entry's type, mode and owner (root) are said there, times are 0, and a file's contents
are read from where they are when the archive is written."""

import os
import re
import stat
import subprocess
import tempfile
from pathlib import Path

from mvmmtools.images import BuildError, run


def mtree_word(text):
    """text as one word of an mtree manifest: every byte but [A-Za-z0-9._+-/] as a backslash and three octal digits."""
    return re.sub(rb"[^A-Za-z0-9._+/-]", lambda m: b"\\%03o" % m.group(0)[0], text.encode()).decode()


class Archive:
    """A newc cpio archive to be written by bsdtar: entries are added by path (parents become directories first),
    each path once."""

    def __init__(self):
        self._scratch = tempfile.TemporaryDirectory(prefix="mvmm-archive.")
        self._manifest = ["#mtree", "/set uid=0 gid=0 time=0.0 nlink=1"]
        self._paths = set()

    def _entry(self, path, keywords):
        if path in self._paths:
            raise BuildError(f"cpio: {path} added twice")
        parts = Path(path).parts[1:-1]
        for i in range(len(parts)):
            self.dir("/" + "/".join(parts[: i + 1]))
        self._paths.add(path)
        name = path.strip("/")
        self._manifest.append(f"{mtree_word(name)} {keywords}")
        if "/" not in name and keywords.startswith("type=dir"):
            # A name without a slash is relative to the manifest's current folder, and a folder's line enters it.
            self._manifest.append("..")

    def dir(self, path):
        if path not in self._paths:
            self._entry(path, "type=dir mode=0755 nlink=2")

    def copy(self, path, src, mode=None):
        """Adds the content of src (symlinks followed) at path; mode defaults to src's permission bits."""
        real = os.path.realpath(src)
        mode = stat.S_IMODE(os.stat(real).st_mode) if mode is None else mode
        self._entry(path, f"type=file mode={mode:04o} contents={mtree_word(real)}")

    def file(self, path, data, mode=0o644):
        """Adds the bytes `data` at path."""
        held = Path(self._scratch.name) / str(len(self._manifest))
        held.write_bytes(data)
        self.copy(path, held, mode)

    def symlink(self, path, target):
        self._entry(path, f"type=link mode=0777 link={mtree_word(target)}")

    def chardev(self, path, major, minor):
        self._entry(path, f"type=char mode=0600 device=native,{major},{minor}")

    def has(self, path):
        return path in self._paths

    def write(self, out=None):
        """Writes the archive to the binary file `out`, or returns its bytes; the archive is done then."""
        manifest = Path(self._scratch.name) / "manifest"
        manifest.write_text("\n".join(self._manifest) + "\n")
        if out is not None:
            out.flush()
        try:
            return run(["bsdtar", "--format", "newc", "-cf", "-", f"@{manifest}"], binary=True,
                       stdout=subprocess.PIPE if out is None else out)
        finally:
            self._scratch.cleanup()


def ldd_files(binary):
    """The files binary needs at run time per ldd: [(path the loader looks at, real file)], loader included."""
    out = run(["ldd", str(binary)])
    if "not a dynamic executable" in out:
        return []
    files = []
    for line in out.splitlines():
        line = line.strip()
        if "=>" in line:
            name, _, rest = line.partition("=>")
            rest = rest.strip()
            if rest.startswith("not found"):
                raise BuildError(f"{binary}: shared library {name.strip()} not found")
            path = rest.split()[0]
        else:
            path = line.split()[0]
        if path.startswith("/"):
            files.append((path, os.path.realpath(path)))
    return files


def add_binary(archive, binary, dest=None):
    """Adds binary (at dest, default its own path) and its shared libraries at the paths ldd reports."""
    binary = Path(binary).resolve()
    archive.copy(dest or str(binary), binary)
    for path, real in ldd_files(binary):
        if not archive.has(path):
            archive.copy(path, real)
