"""Builds (or finds in the cache) mvmm's guest images and prints their paths.

  guest-images/build [--get NAME] [TARGET...]

TARGETs: guest (the default guest), hostvm (the test host's base), peer (Debian's QEMU layer for
mvmm-hostvm --peer-qemu); default: guest hostvm. Prints NAME=PATH lines:
  kernel        the Debian cloud kernel (bzImage), for the guest and the test host
  guest_initrd  the default guest's initramfs
  io_tool       mvmm-io, the guest's I/O workload (static; also run in the test host to fill disks)
  hostvm_initrd the test host's base initramfs
  peer_layer    the uncompressed cpio layer with Debian's qemu-system-x86_64
--get NAME prints only that path. --prune DAYS first removes what no build used for DAYS days. The cache is ${MVMM_CACHE:-${XDG_CACHE_HOME:-~/.cache}/mvmm};
a build happens only when an input changed (see guest-images/README.md), quietly otherwise.
"""

import argparse
import sys

from mvmmtools.images import BuildError
from mvmmtools.images.build import OUTPUTS, TARGETS, build
from mvmmtools.images.cache import prune


def main():
    ap = argparse.ArgumentParser(prog="build", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", choices=[[], *TARGETS], metavar="TARGET")
    ap.add_argument("--get", choices=OUTPUTS, help="print only this path")
    ap.add_argument("--prune", type=float, metavar="DAYS", help="remove cache entries unused for DAYS days")
    args = ap.parse_args()
    if args.prune is not None:
        for path in prune(args.prune):
            print(f"guest-images/build: removed {path}", file=sys.stderr)
    targets = args.targets or ([OUTPUTS[args.get]] if args.get else ["guest", "hostvm"])
    try:
        paths = build(targets)
    except BuildError as e:
        print(f"guest-images/build: {e}", file=sys.stderr)
        return 1
    if args.get:
        if args.get not in paths:
            print(f"guest-images/build: {args.get} is not built by {' '.join(targets)}", file=sys.stderr)
            return 2
        print(paths[args.get])
    else:
        for name, path in paths.items():
            print(f"{name}={path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
