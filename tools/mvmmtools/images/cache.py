"""The cache the images live in: ${MVMM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/mvmm}, one folder per entry, keyed by a
hash of its inputs, made atomically under a lock (guest-images/README.md, "Cache")."""

import contextlib
import fcntl
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from mvmmtools import REPO


def cache_root():
    base = os.environ.get("MVMM_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "mvmm")
    return Path(base)


def write_atomic(path, data):
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)


def digest(*parts):
    """A cache key: the hash of the parts, each a string or a file or folder of the checkout (its files' paths and
    contents)."""
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, Path):
            files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
            for f in files:
                h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
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
