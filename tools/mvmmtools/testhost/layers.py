"""The test host's initramfs for one run: its base image (guest-images/hostvm), the peer QEMU layer when asked for,
and a layer of this run's own: the command's binary and libraries, the files its arguments name, and
/hostvm/scenario. Linux unpacks the concatenated archives into one tree."""

import os
import re
import shlex
from pathlib import Path

from mvmmtools import REPO
from mvmmtools.images.archive import Archive, add_binary
from mvmmtools.images.build import hostvm_image, peer_layer
from mvmmtools.images.debian import Inputs
from mvmmtools.say import say
from mvmmtools.testhost import DEFAULT_MVMM, EXIT_FIXTURE, PEER_QEMU, Fixture, disk_device

BIG_FILE = 256 << 20


class RunLayer:
    """The per-run layer: the command's binary and libraries, the files its arguments name, the scenario."""

    def __init__(self, disks):
        self.archive = Archive()
        self.disks = disks  # real path of an outer disk image -> test host device

    def path(self, word):
        """A word of an argument, rewritten if it names a disk image or a file (which is then copied in)."""
        if not os.path.exists(word):
            return word
        real = os.path.realpath(word)
        if real in self.disks:
            return self.disks[real]
        if not os.path.isfile(word):
            return word
        dest = os.path.abspath(word)
        if not self.archive.has(dest):
            size = os.path.getsize(word)
            if size > BIG_FILE:
                say(f"copying {word} ({size >> 20} MiB) into the test host's RAM; for disks use --disk-image",
                    "mvmm-hostvm")
            self.archive.copy(dest, word)
        return dest

    def argument(self, arg):
        if os.path.exists(arg):
            return self.path(arg)
        return re.sub(r"[^,=:]+", lambda m: self.path(m.group(0)), arg)

    def finish(self, env, disk_checks, body, out):
        """Adds /hostvm/scenario (the environment, the disk order check, then body: shell lines); writes the layer
        to the file out."""
        lines = ["# written by tools/mvmm-hostvm", ". /lib/mvmm/lib.sh", ". /lib/mvmm/hostvm.sh"]
        lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
        lines += [f"hostvm_disk {dev} {serial} || exit {EXIT_FIXTURE}" for dev, serial in disk_checks]
        self.archive.file("/hostvm/scenario", ("\n".join(lines + body) + "\n").encode())
        self.archive.write(out)


def outer_disks(images):
    """{real path: test host device}, the outer QEMU's options, and (device, serial) pairs the scenario checks."""
    disks, options, checks = {}, [], []
    for i, image in enumerate(images):
        if not os.path.exists(image):
            raise Fixture(f"--disk-image {image}: no such file")
        dev, serial = disk_device(i), f"mvmm-disk-{i}"
        disks[os.path.realpath(image)] = dev
        checks.append((dev.removeprefix("/dev/"), serial))
        # cache=writeback: a flush from the test host becomes an fdatasync of FILE; unflushed data is lost at exit.
        options += ["-drive", f"file={image},format=raw,if=none,id=d{i},cache=writeback",
                    "-device", f"virtio-blk-pci,drive=d{i},serial={serial}"]
    return disks, options, checks


def find_mvmm(config, required):
    mvmm = Path(config.mvmm or DEFAULT_MVMM)
    if mvmm.is_file():
        return mvmm.resolve()
    if required:
        others = sorted(str(p) for p in REPO.glob("build*/vmm/mvmm"))
        hint = f" (pass one with --mvmm: {', '.join(others)})" if others and not config.mvmm else \
            " (build it first: meson setup build && ninja -C build)" if not config.mvmm else ""
        raise Fixture(f"{mvmm}: no mvmm binary{hint}")
    return None


def build_initrd(config, tmpdir):
    """Writes base (+ peer) + run layers into one initrd file; returns (kernel, initrd path, outer disk options)."""
    inputs = Inputs()
    layers = [hostvm_image(inputs)]
    disks, qemu_disks, checks = outer_disks(config.disk_images)
    layer = RunLayer(disks)
    env = {} if config.color else {"NO_COLOR": "1"}  # the test host's console is a terminal, our output may not be
    if config.peer_qemu:
        layers.append(peer_layer())
        env["PEER_QEMU"] = " ".join(PEER_QEMU)
    mvmm = find_mvmm(config, required=not config.peer_qemu and not config.script)
    if mvmm:
        add_binary(layer.archive, mvmm)
        env["MVMM"] = str(mvmm)
    for f in [*config.files, *config.binaries]:
        if not os.path.isfile(f):
            raise Fixture(f"--file/--binary {f}: no such regular file")
        if f in config.binaries:
            add_binary(layer.archive, f, os.path.abspath(f))
        layer.path(f)
    words = [layer.argument(a) for a in config.command]
    if config.script:
        layer.archive.copy("/hostvm/script", config.script, 0o755)
        body = ["set -- " + " ".join(shlex.quote(w) for w in words), ". /hostvm/script"]
    else:
        command = (PEER_QEMU if config.peer_qemu else [env["MVMM"]]) + words
        body = ["hostvm_exec " + " ".join(shlex.quote(w) for w in command)]
    initrd = Path(tmpdir) / "initrd"
    with open(initrd, "wb") as out:
        for path in layers:
            data = Path(path).read_bytes()
            out.write(data + b"\0" * (-len(data) % 4))  # the kernel skips zero padding between archives
        layer.finish(env, checks, body, out)
    return inputs.vmlinuz(), initrd, qemu_disks
