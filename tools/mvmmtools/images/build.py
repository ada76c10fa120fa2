"""What is built: the default guest's initramfs, the test host's base initramfs, the peer QEMU layer and the
guest's I/O tool, each cached under a key of everything that goes in or builds it (guest-images/README.md)."""

import gzip
import os
from pathlib import Path

from mvmmtools.images import CODE, GUEST_IMAGES, BuildError, log, run
from mvmmtools.images.archive import Archive, add_binary, ldd_files
from mvmmtools.images.cache import cached, digest, write_atomic
from mvmmtools.images.debian import Inputs, installed_version
from mvmmtools.images.modules import add_modules

# Debian's QEMU looks for firmware in these folders (its CONFIG_QEMU_FIRMWAREPATH).
QEMU_BINARY = Path("/usr/bin/qemu-system-x86_64")
QEMU_DATA_DIRS = [Path("/usr/share/qemu"), Path("/usr/share/seabios"), Path("/usr/lib/ipxe/qemu")]
QEMU_PACKAGES = ["qemu-system-x86", "qemu-system-data", "seabios", "ipxe-qemu"]
COMMON = [*CODE, GUEST_IMAGES / "common"]


def add_busybox(archive, busybox_root):
    """Busybox at /bin/busybox with a link per applet (from its own --list-full), /dev/console and the usual dirs."""
    busybox = Path(busybox_root) / "bin/busybox"
    archive.copy("/bin/busybox", busybox, 0o755)
    for applet in run([str(busybox), "--list-full"]).split():
        if applet != "bin/busybox":
            archive.symlink("/" + applet, "/bin/busybox")
    for d in ("/dev", "/proc", "/sys", "/tmp", "/run"):
        archive.dir(d)
    archive.chardev("/dev/console", 5, 1)  # the kernel opens it for init's stdio before devtmpfs is mounted


def initramfs(inputs, init, modules_file, extra=None):
    """busybox + the common shell library + modules + init (+ extra(archive)) as a gzip'd newc cpio."""
    archive = Archive()
    add_busybox(archive, inputs.busybox_root())
    for f in sorted((GUEST_IMAGES / "common").iterdir()):
        archive.copy(f"/lib/mvmm/{f.name}", f, 0o644)
    add_modules(archive, inputs.kernel_root(), inputs.release, modules_file)
    if extra:
        extra(archive)
    archive.copy("/init", init, 0o755)
    return gzip.compress(archive.write(), compresslevel=6, mtime=0)


IO_SOURCE = GUEST_IMAGES / "io" / "mvmm_io.cc"
IO_FLAGS = ["-std=c++20", "-O2", "-static", "-Wall", "-Wextra", "-D_GNU_SOURCE"]


def io_tool():
    """guest-images/io/mvmm_io.cc built statically (the guest has no shared libraries), keyed by the source, the
    flags, the compiler and the C/C++ libraries it links in."""
    compiler = run(["c++", "--version"]).splitlines()[0]
    libraries = []
    for name in ("libstdc++.a", "libc.a"):
        path = os.path.realpath(run(["c++", f"-print-file-name={name}"]).strip())
        libraries.append(f"{path}:{os.stat(path).st_size}:{os.stat(path).st_mtime_ns}")
    key = digest(IO_SOURCE, *IO_FLAGS, compiler, *libraries, *CODE)

    def make(d):
        log(f"building mvmm-io ({key})")
        run(["c++", *IO_FLAGS, "-o", str(d / "mvmm-io"), str(IO_SOURCE)])

    return cached("io", key, make) / "mvmm-io"


# The sg3_utils programs the guest runs (guest-images/scripts/sg-compare), from this host's Debian sg3-utils, with
# the shared libraries they need (libsgutils2 and the C library, as ldd finds them here).
SG3_PACKAGE = "sg3-utils"
SG3_TOOLS = ["sg_dd", "sg_inq", "sg_luns", "sg_modes", "sg_opcodes", "sg_raw", "sg_readcap", "sg_requests",
             "sg_reset", "sg_sync", "sg_turs", "sg_unmap", "sg_verify", "sg_vpd", "sg_wr_mode", "sg_write_same"]


def guest_image(inputs):
    """The default guest's initramfs: /init with markers, modules, guest-images/scripts/ at /scripts, the I/O
    workload tool (io_tool) at /bin/mvmm-io, and sg3_utils (SG3_TOOLS) at /usr/bin."""
    g, scripts = GUEST_IMAGES / "guest", GUEST_IMAGES / "scripts"
    tool = io_tool()
    sg3_version = installed_version(SG3_PACKAGE)  # first: a clear error when it is missing
    sg3 = [Path("/usr/bin") / name for name in SG3_TOOLS]
    libs = sorted({f"{path}:{os.stat(real).st_size}" for t in sg3 for path, real in ldd_files(t)})
    key = digest(inputs.kernel_pkg, inputs.kernel_version, inputs.busybox_version, *COMMON, g, scripts,
                 tool.parent.name, sg3_version, *libs)

    def add_scripts(archive):
        for f in sorted(scripts.iterdir()):
            archive.copy(f"/scripts/{f.name}", f, 0o755)
        archive.copy("/bin/mvmm-io", tool, 0o755)
        for program in sg3:
            add_binary(archive, program)

    def make(d):
        log(f"building the default guest's initramfs ({key})")
        write_atomic(d / "initramfs.cpio.gz", initramfs(inputs, g / "init", g / "modules", add_scripts))

    return cached("guest", key, make) / "initramfs.cpio.gz"


def hostvm_image(inputs):
    """The test host's base initramfs: kvm, kvm_amd, virtio disks, and the /init that runs /hostvm/scenario."""
    h = GUEST_IMAGES / "hostvm"
    key = digest(inputs.kernel_pkg, inputs.kernel_version, inputs.busybox_version, *COMMON, h)

    def make(d):
        log(f"building the test host's base initramfs ({key})")
        helpers = lambda archive: archive.copy("/lib/mvmm/hostvm.sh", h / "hostvm.sh", 0o644)
        write_atomic(d / "base.cpio.gz", initramfs(inputs, h / "init", h / "modules", helpers))

    return cached("hostvm", key, make) / "base.cpio.gz"


def peer_layer():
    """The cpio layer with Debian's qemu-system-x86_64, its libraries and firmware (for --peer-qemu)."""
    versions = [f"{p}={installed_version(p)}" for p in QEMU_PACKAGES]
    if not QEMU_BINARY.exists():
        raise BuildError(f"{QEMU_BINARY} is missing (install qemu-system-x86: run tools/setup)")
    libs = [f"{path}:{os.stat(real).st_size}:{os.stat(real).st_mtime_ns}" for path, real in ldd_files(QEMU_BINARY)]
    key = digest(*versions, *libs, *CODE)

    def make(d):
        log(f"building the peer QEMU layer ({key})")
        archive = Archive()
        add_binary(archive, QEMU_BINARY)
        for top in QEMU_DATA_DIRS:
            for f in sorted(top.rglob("*")):
                if f.is_file():  # symlinks followed: Debian links firmware across these folders
                    archive.copy(str(f), f, 0o644)
        # Not compressed: appended after the gzip'd base, unpacked faster by the emulated test host.
        write_atomic(d / "peer.cpio", archive.write())

    return cached("peer", key, make) / "peer.cpio"


# What guest-images/build makes: each target's outputs, by name.
TARGETS = {
    "guest": lambda inp: {"kernel": inp.vmlinuz(), "guest_initrd": guest_image(inp), "io_tool": io_tool()},
    "hostvm": lambda inp: {"kernel": inp.vmlinuz(), "hostvm_initrd": hostvm_image(inp)},
    "peer": lambda inp: {"peer_layer": peer_layer()},
}
OUTPUTS = {"kernel": "guest", "guest_initrd": "guest", "io_tool": "guest", "hostvm_initrd": "hostvm",
           "peer_layer": "peer"}


def build(targets):
    """{output name: path} of the targets, built unless cached."""
    inputs, paths = Inputs(), {}
    for t in targets:
        paths.update(TARGETS[t](inputs))
    return paths


def get(name):
    """The path of one output (as `guest-images/build --get NAME`), built unless cached."""
    return str(build([OUTPUTS[name]])[name])
