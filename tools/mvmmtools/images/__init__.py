"""Builds mvmm's guest images and the test host image from Debian packages, into a cache outside the checkout.

Used by guest-images/build (cli.py), the test host (per-run layers) and the benchmarks and tests (get()). External
tools: apt-get/apt-cache, dpkg-deb, kmod (depmod, modprobe), libarchive-tools (bsdtar), ldd. See
guest-images/README.md for what is built and how the cache is keyed."""

import shutil
import subprocess
import sys
from pathlib import Path

from mvmmtools import REPO

GUEST_IMAGES = REPO / "guest-images"  # what goes into the images: init scripts, module lists, test scripts
CODE = sorted(Path(__file__).resolve().parent.glob("*.py"))  # what builds them: part of every cache key


class BuildError(Exception):
    """A failure with a message meant for the user."""


def log(msg):
    print(f"guest-images: {msg}", file=sys.stderr, flush=True)


def run(cmd, binary=False, stdout=subprocess.PIPE, **kw):
    """Runs cmd (looked up in sbin too: depmod and modprobe live there); returns its output (bytes if binary), or
    None when it went to the file `stdout`. A failure becomes a BuildError naming the command."""
    program = shutil.which(cmd[0]) or shutil.which(cmd[0], path="/usr/sbin:/sbin")
    if program is None:
        raise BuildError(f"'{cmd[0]}' is not installed (run tools/setup)")
    res = subprocess.run([program, *cmd[1:]], check=False, stdout=stdout, stderr=subprocess.PIPE, **kw)
    if res.returncode != 0:
        raise BuildError(f"'{' '.join(map(str, cmd))}' failed ({res.returncode}): "
                         f"{res.stderr.decode(errors='replace').strip()}")
    if stdout is not subprocess.PIPE:
        return None
    return res.stdout if binary else res.stdout.decode()
