"""Builds mvmm's guest images and the test host image into a cache outside the checkout.

Used by guest-images/build (command line) and tools/mvmm-hostvm (per-run layers).
Only the Python standard library; external tools: apt-get/apt-cache, dpkg-deb, depmod (kmod), ldd.
See guest-images/README.md for what is built and how the cache is keyed.
"""

import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL_META = "linux-image-cloud-amd64"
BUSYBOX = "busybox-static"
# Debian's QEMU looks for firmware in these folders (its CONFIG_QEMU_FIRMWAREPATH).
QEMU_BINARY = Path("/usr/bin/qemu-system-x86_64")
QEMU_DATA_DIRS = [Path("/usr/share/qemu"), Path("/usr/share/seabios"), Path("/usr/lib/ipxe/qemu")]
QEMU_PACKAGES = ["qemu-system-x86", "qemu-system-data", "seabios", "ipxe-qemu"]


class BuildError(Exception):
    """A failure with a message meant for the user."""


def log(msg):
    print(f"guest-images: {msg}", file=sys.stderr, flush=True)


def cache_root():
    base = os.environ.get("MVMM_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "mvmm")
    return Path(base)


def run(cmd, **kw):
    """Runs cmd, returns its stdout; a failure becomes a BuildError naming the command."""
    try:
        res = subprocess.run(cmd, check=False, text=True, capture_output=True, **kw)
    except FileNotFoundError:
        raise BuildError(f"'{cmd[0]}' is not installed (run tools/setup)") from None
    if res.returncode != 0:
        raise BuildError(f"'{' '.join(map(str, cmd))}' failed ({res.returncode}): {res.stderr.strip()}")
    return res.stdout


# ---------------------------------------------------------------- newc cpio


class Cpio:
    """A newc cpio archive built in memory; parents are added as directories; times are 0 (reproducible)."""

    def __init__(self):
        self._out = io.BytesIO()
        self._ino = 0
        self._paths = set()

    def _entry(self, path, mode, data=b"", rdev=(0, 0)):
        name = path.strip("/").encode()
        self._ino += 1
        fields = [self._ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data), 0, 0,
                  rdev[0], rdev[1], len(name) + 1, 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        self._out.write(hdr + name + b"\0")
        self._out.write(b"\0" * (-(len(hdr) + len(name) + 1) % 4))
        self._out.write(data)
        self._out.write(b"\0" * (-len(data) % 4))

    def _parents(self, path):
        parts = Path(path).parts[1:-1]
        for i in range(len(parts)):
            self.dir("/" + "/".join(parts[: i + 1]))

    def _claim(self, path):
        if path in self._paths:
            raise BuildError(f"cpio: {path} added twice")
        self._parents(path)
        self._paths.add(path)

    def dir(self, path):
        if path not in self._paths:
            self._claim(path)
            self._entry(path, stat.S_IFDIR | 0o755)

    def file(self, path, data, mode=0o644):
        self._claim(path)
        self._entry(path, stat.S_IFREG | mode, data)

    def copy(self, path, src, mode=None):
        """Adds the content of src (symlinks followed) at path; mode defaults to src's permission bits."""
        src = Path(src)
        self.file(path, src.read_bytes(), stat.S_IMODE(src.stat().st_mode) if mode is None else mode)

    def symlink(self, path, target):
        self._claim(path)
        self._entry(path, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, path, major, minor):
        self._claim(path)
        self._entry(path, stat.S_IFCHR | 0o600, rdev=(major, minor))

    def has(self, path):
        return path in self._paths

    def finish(self):
        self._entry("TRAILER!!!", 0)
        return self._out.getvalue()


def add_busybox(cpio, busybox_root):
    """Busybox at /bin/busybox with a link per applet (from its own --list-full), /dev/console and the usual dirs."""
    busybox = Path(busybox_root) / "bin/busybox"
    cpio.copy("/bin/busybox", busybox, 0o755)
    for applet in run([str(busybox), "--list-full"]).split():
        if applet != "bin/busybox":
            cpio.symlink("/" + applet, "/bin/busybox")
    for d in ("/dev", "/proc", "/sys", "/tmp", "/run"):
        cpio.dir(d)
    cpio.chardev("/dev/console", 5, 1)  # the kernel opens it for init's stdio before devtmpfs is mounted


def write_atomic(path, data):
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)


# ---------------------------------------------------------------- Debian packages


def candidate_versions(pkgs):
    """{package: (candidate version, Depends field)} from one apt-cache call (apt-cache takes ~0.5 s a call)."""
    out = run(["apt-cache", "show", "--no-all-versions", *pkgs])
    found = {}
    for record in out.split("\n\n"):
        fields = dict(re.findall(r"^(\S+): (.*)$", record, re.M))
        if "Package" in fields:
            found[fields["Package"]] = (fields.get("Version"), fields.get("Depends", ""))
    for pkg in pkgs:
        if not found.get(pkg, (None,))[0]:
            raise BuildError(f"no candidate version of {pkg} in apt's lists (run 'apt-get update' or tools/setup)")
    return found


def installed_version(pkg):
    try:
        return run(["dpkg-query", "-W", "-f", "${Version}", pkg]).strip()
    except BuildError:
        raise BuildError(f"package {pkg} is not installed (run tools/setup)") from None


def resolve_inputs():
    """The Debian packages the images are built from: the real image package behind linux-image-cloud-amd64,
    its version and kernel release, and busybox-static's version. Remembered in the cache until apt's lists or
    dpkg's status change, so that a cached build costs no apt-cache call."""
    stamp = []
    for f in ("/var/lib/apt/lists", "/var/lib/dpkg/status", "/etc/apt/sources.list", "/etc/apt/sources.list.d"):
        with contextlib.suppress(OSError):
            stamp.append(f"{f}:{os.stat(f).st_mtime_ns}")
    memo = cache_root() / "apt-resolution.json"
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(memo.read_text())
        if saved["stamp"] == stamp:
            return saved["inputs"]
    found = candidate_versions([KERNEL_META, BUSYBOX])
    meta_ver, depends = found[KERNEL_META]
    m = re.search(r"\b(linux-image-(\S+-cloud-amd64))\s*\(=\s*([^)\s]+)\)", depends)
    if not m:
        raise BuildError(f"cannot find the kernel package that {KERNEL_META} {meta_ver} depends on")
    inputs = {"kernel_pkg": m.group(1), "release": m.group(2), "kernel_version": m.group(3),
              "busybox_version": found[BUSYBOX][0]}
    memo.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(memo, json.dumps({"stamp": stamp, "inputs": inputs}).encode())
    return inputs


def fetch_deb(pkg, version):
    """Downloads pkg=version once into the cache; returns the .deb path."""
    debs = cache_root() / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    name = f"{pkg}_{version.replace(':', '%3a')}_amd64.deb"
    path = debs / name
    if path.exists():
        return path
    log(f"downloading {pkg} {version}")
    with tempfile.TemporaryDirectory(dir=debs) as tmp:
        run(["apt-get", "download", "-q", f"{pkg}={version}"], cwd=tmp)
        got = list(Path(tmp).glob("*.deb"))
        if len(got) != 1:
            raise BuildError(f"apt-get download {pkg}={version} gave {len(got)} files")
        got[0].replace(path)
    return path


def extracted(pkg, version, prepare=None):
    """The package's files extracted once under cache/pkgs/<pkg>_<version>/ (prepare(root) runs before publishing)."""

    def make(tmp):
        run(["dpkg-deb", "-x", str(fetch_deb(pkg, version)), str(tmp)])
        if prepare:
            prepare(tmp)

    return cached("pkgs", f"{pkg}_{version.replace(':', '%3a')}", make)


class Inputs:
    """Versions the images are built from, resolved from apt once per process."""

    def __init__(self):
        vars(self).update(resolve_inputs())

    def kernel_root(self):
        return extracted(self.kernel_pkg, self.kernel_version,
                         lambda root: run(["depmod", "-b", str(root), self.release]))

    def busybox_root(self):
        return extracted(BUSYBOX, self.busybox_version)

    def vmlinuz(self):
        path = self.kernel_root() / "boot" / f"vmlinuz-{self.release}"
        if not path.exists():
            raise BuildError(f"{path} missing from {self.kernel_pkg}")
        return path


# ---------------------------------------------------------------- kernel modules


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
    """Module files for `wanted` and everything they depend on, from depmod's modules.dep, in load order.

    Modules built into the kernel (modules.builtin) are skipped. Returns [(name, relative path)]."""
    mdir = Path(kroot) / "lib/modules" / release
    deps, paths = {}, {}
    for line in (mdir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        name = module_name(mod)
        paths[name] = mod
        deps[name] = [module_name(d) for d in rest.split()]
    builtin = {module_name(l) for l in (mdir / "modules.builtin").read_text().split()}
    order, seen = [], set()

    def visit(name, chain):
        if name in seen:
            return
        if name in chain:
            raise BuildError(f"module dependency loop: {' -> '.join(chain + [name])}")
        for dep in deps[name]:
            visit(dep, chain + [name])
        seen.add(name)
        order.append((name, paths[name]))

    for name in wanted:
        if name in builtin:
            continue
        if name not in deps:
            raise BuildError(f"module {name} is neither in modules.dep nor built into {release}")
        visit(name, [])
    return order


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


def add_modules(cpio, kroot, release, modules_file):
    """Copies the resolved modules to /lib/modules/ and writes /lib/modules/load-order ('file params' lines)."""
    wanted, params = read_module_list(modules_file)
    lines = []
    for name, rel in resolve_modules(kroot, release, wanted):
        src = Path(kroot) / "lib/modules" / release / rel
        dest = f"{name}.ko"
        cpio.file(f"/lib/modules/{dest}", module_bytes(src))
        lines.append(f"{dest} {params.get(name, '')}".rstrip())
    cpio.file("/lib/modules/load-order", ("\n".join(lines) + "\n").encode())


# ---------------------------------------------------------------- shared libraries


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


def add_binary(cpio, binary, dest=None):
    """Adds binary (at dest, default its own path) and its shared libraries at the paths ldd reports."""
    binary = Path(binary).resolve()
    cpio.copy(dest or str(binary), binary)
    for path, real in ldd_files(binary):
        if not cpio.has(path):
            cpio.copy(path, real)


# ---------------------------------------------------------------- cached builds


def digest(*parts):
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, Path):
            files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
            for f in files:
                h.update(str(f.relative_to(HERE)).encode() + b"\0" + f.read_bytes() + b"\0")
        else:
            h.update(str(p).encode() + b"\0")
    return h.hexdigest()[:16]


_lock_depth = 0


@contextlib.contextmanager
def cache_lock():
    """Serialises builds between processes (helpers may build at once); reentrant within a process."""
    global _lock_depth
    if _lock_depth:
        _lock_depth += 1
        try:
            yield
        finally:
            _lock_depth -= 1
        return
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        _lock_depth = 1
        try:
            yield
        finally:
            _lock_depth = 0


def cached(kind, key, make):
    """cache/<kind>/<key>/ made by make(tmpdir) unless present; builds are serialised by a lock."""
    dest = cache_root() / kind / key
    if dest.exists():
        with contextlib.suppress(OSError):
            os.utime(dest)  # the last use, for prune()
        return dest
    with cache_lock():
        if dest.exists():
            return dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=".tmp-"))
        try:
            make(tmp)
            tmp.chmod(0o755)
            tmp.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def prune(days):
    """Removes cache entries (packages, images, layers) not used for `days` days; returns their paths."""
    removed = []
    limit = time.time() - days * 86400
    with cache_lock():
        for kind in ("pkgs", "guest", "hostvm", "peer", "io"):
            for entry in sorted((cache_root() / kind).glob("*")):
                if entry.stat().st_mtime < limit or entry.name.startswith(".tmp-"):
                    shutil.rmtree(entry)
                    removed.append(entry)
        for deb in (cache_root() / "debs").glob("*.deb"):
            if deb.stat().st_mtime < limit:
                deb.unlink()
                removed.append(deb)
    return removed


COMMON = [HERE / "images.py", HERE / "common"]


def initramfs(inputs, init, modules_file, extra=None):
    """busybox + the common shell library + modules + init (+ extra(cpio)) as a gzip'd newc cpio."""
    cpio = Cpio()
    add_busybox(cpio, inputs.busybox_root())
    for f in sorted((HERE / "common").iterdir()):
        cpio.copy(f"/lib/mvmm/{f.name}", f, 0o644)
    add_modules(cpio, inputs.kernel_root(), inputs.release, modules_file)
    if extra:
        extra(cpio)
    cpio.copy("/init", init, 0o755)
    return gzip.compress(cpio.finish(), compresslevel=6, mtime=0)


IO_SOURCE = HERE / "io" / "mvmm_io.cc"
IO_FLAGS = ["-std=c++20", "-O2", "-static", "-Wall", "-Wextra", "-D_GNU_SOURCE"]


def io_tool():
    """guest-images/io/mvmm_io.cc built statically (the guest has no shared libraries), keyed by the source, the
    flags, the compiler and the C/C++ libraries it links in."""
    compiler = run(["c++", "--version"]).splitlines()[0]
    libraries = []
    for name in ("libstdc++.a", "libc.a"):
        path = os.path.realpath(run(["c++", f"-print-file-name={name}"]).strip())
        libraries.append(f"{path}:{os.stat(path).st_size}:{os.stat(path).st_mtime_ns}")
    key = digest(IO_SOURCE, *IO_FLAGS, compiler, *libraries, HERE / "images.py")

    def make(d):
        log(f"building mvmm-io ({key})")
        run(["c++", *IO_FLAGS, "-o", str(d / "mvmm-io"), str(IO_SOURCE)])

    return cached("io", key, make) / "mvmm-io"


# The sg3_utils programs the guest runs (scripts/sg-compare), from this host's Debian sg3-utils, with the shared
# libraries they need (libsgutils2 and the C library, as ldd finds them here).
SG3_PACKAGE = "sg3-utils"
SG3_TOOLS = ["sg_dd", "sg_inq", "sg_luns", "sg_modes", "sg_opcodes", "sg_raw", "sg_readcap", "sg_requests",
             "sg_reset", "sg_sync", "sg_turs", "sg_unmap", "sg_verify", "sg_vpd", "sg_wr_mode", "sg_write_same"]


def guest_image(inputs):
    """The default guest's initramfs: /init with markers, modules, guest-images/scripts/ at /scripts, the I/O
    workload tool (io_tool) at /bin/mvmm-io, and sg3_utils (SG3_TOOLS) at /usr/bin."""
    g = HERE / "guest"
    tool = io_tool()
    sg3_version = installed_version(SG3_PACKAGE)  # first: a clear error when it is missing
    sg3 = [Path("/usr/bin") / name for name in SG3_TOOLS]
    libs = sorted({f"{path}:{os.stat(real).st_size}" for t in sg3 for path, real in ldd_files(t)})
    key = digest(inputs.kernel_pkg, inputs.kernel_version, inputs.busybox_version, *COMMON, g, HERE / "scripts",
                 tool.parent.name, sg3_version, *libs)

    def scripts(cpio):
        for f in sorted((HERE / "scripts").iterdir()):
            cpio.copy(f"/scripts/{f.name}", f, 0o755)
        cpio.copy("/bin/mvmm-io", tool, 0o755)
        for program in sg3:
            add_binary(cpio, program)

    def make(d):
        log(f"building the default guest's initramfs ({key})")
        write_atomic(d / "initramfs.cpio.gz", initramfs(inputs, g / "init", g / "modules", scripts))

    return cached("guest", key, make) / "initramfs.cpio.gz"


def hostvm_image(inputs):
    """The test host's base initramfs: kvm, kvm_amd, virtio disks, and the /init that runs /hostvm/scenario."""
    h = HERE / "hostvm"
    key = digest(inputs.kernel_pkg, inputs.kernel_version, inputs.busybox_version, *COMMON, h)

    def make(d):
        log(f"building the test host's base initramfs ({key})")
        helpers = lambda cpio: cpio.copy("/lib/mvmm/hostvm.sh", h / "hostvm.sh", 0o644)
        write_atomic(d / "base.cpio.gz", initramfs(inputs, h / "init", h / "modules", helpers))

    return cached("hostvm", key, make) / "base.cpio.gz"


def peer_layer():
    """The cpio layer with Debian's qemu-system-x86_64, its libraries and firmware (for --peer-qemu)."""
    versions = [f"{p}={installed_version(p)}" for p in QEMU_PACKAGES]
    if not QEMU_BINARY.exists():
        raise BuildError(f"{QEMU_BINARY} is missing (install qemu-system-x86: run tools/setup)")
    libs = [f"{path}:{os.stat(real).st_size}:{os.stat(real).st_mtime_ns}" for path, real in ldd_files(QEMU_BINARY)]
    key = digest(*versions, *libs, HERE / "images.py")

    def make(d):
        log(f"building the peer QEMU layer ({key})")
        cpio = Cpio()
        add_binary(cpio, QEMU_BINARY)
        for top in QEMU_DATA_DIRS:
            for f in sorted(top.rglob("*")):
                if f.is_file():  # symlinks followed: Debian links firmware across these folders
                    cpio.copy(str(f), f, 0o644)
        # Not compressed: appended after the gzip'd base, unpacked faster by the emulated test host.
        write_atomic(d / "peer.cpio", cpio.finish())

    return cached("peer", key, make) / "peer.cpio"
