"""The Debian packages the images are built from: resolved with apt-cache, downloaded once with apt-get, extracted
once with dpkg-deb into the cache."""

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

from mvmmtools.images import BuildError, log, run
from mvmmtools.images.cache import cache_root, cached, write_atomic

KERNEL_META = "linux-image-cloud-amd64"
BUSYBOX = "busybox-static"


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
