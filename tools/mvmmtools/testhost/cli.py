"""Runs mvmm inside the test host VM: a QEMU TCG machine with AMD SVM, Debian's kernel and kvm_amd.

  mvmm-hostvm [--disk-image FILE]... [--timeout SEC] [--mvmm PATH] [--memory SIZE] [--peer-qemu]
              [--timestamps] [--verbose] -- <mvmm arguments>

For hosts whose /dev/kvm cannot run a standard guest (no VMX/SVM, or PVM). mvmm (or, with --peer-qemu, Debian's
qemu-system-x86_64 -accel kvm -M q35 -cpu host -nographic -no-reboot -name peer,debug-threads=on) runs as the test
host's only program; its console output is relayed here line by line and mvmm-hostvm exits with its exit code.

- Every argument that names an existing regular file, alone or inside "key=value,..." or "kind:PATH" options, is
  copied into the test host at the same absolute path (relative names become absolute).
- Each --disk-image FILE becomes a virtio disk of the test host, /dev/vda, /dev/vdb, ... in order; every mention of
  FILE in the arguments is rewritten to that device. Writes that mvmm flushes are in FILE when this tool exits.
- Exit codes: the command's own; 124 when nothing ended within --timeout (a hang; the test host is killed);
  125 when the test host could not run the command (QEMU missing or failing, no /dev/kvm, crash).
- --timestamps: on stderr, each relayed line again, prefixed with the seconds since the latest command was started
  inside the test host (measured here, from the test host's "MVMM-HOSTVM-EXEC <uptime> <program>" line, which is
  also shown there), for time-to-marker measurements; at the end, a timeline of the test host's run.
- --script FILE runs the busybox sh script FILE in the test host instead of one command, with the arguments after --
  (rewritten as above) as "$@", $MVMM (the mvmm binary, when there is one) and with --peer-qemu $PEER_QEMU (the
  peer's command line, unquoted use). Each run it starts with `hostvm_exec COMMAND...` is announced by a
  MVMM-HOSTVM-EXEC line, so one test host boot can run mvmm and the peer side by side. Its exit code is the result.
"""

import argparse
import signal
import sys
from pathlib import Path

from mvmmtools.testhost import DEFAULT_MVMM, HOST_CPUS
from mvmmtools.testhost.vm import HostConfig, TestHost


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="mvmm-hostvm", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--disk-image", action="append", default=[], metavar="FILE",
                    help="attach FILE (raw) as a virtio disk of the test host; repeatable")
    ap.add_argument("--timeout", type=float, default=600, metavar="SEC",
                    help="kill the test host and exit 124 after SEC seconds (default 600)")
    ap.add_argument("--mvmm", type=Path, metavar="PATH", help=f"the mvmm binary (default {DEFAULT_MVMM})")
    ap.add_argument("--memory", default="3G", metavar="SIZE", help="the test host's RAM (default 3G)")
    ap.add_argument("--host-cpus", type=int, default=HOST_CPUS, metavar="N",
                    help="the test host's CPUs (default 1: with 2, QEMU's emulated SVM locks up or stalls about one "
                         "many-disk boot in ten, whichever VMM runs inside; see guest-images/README.md)")
    ap.add_argument("--host-append", default="", metavar="ARGS",
                    help="extra kernel command line parameters for the test host")
    ap.add_argument("--peer-qemu", action="store_true",
                    help="run Debian's qemu-system-x86_64 with KVM instead of mvmm (side-by-side benchmarks)")
    ap.add_argument("--timestamps", action="store_true",
                    help="print each relayed line on stderr with seconds since the command started")
    ap.add_argument("--verbose", action="store_true", help="show the test host's own kernel and boot output")
    ap.add_argument("--script", metavar="FILE",
                    help="run this shell script in the test host instead of one command (see the description)")
    ap.add_argument("--file", action="append", default=[], metavar="PATH",
                    help="copy PATH into the test host at its absolute path; repeatable")
    ap.add_argument("--binary", action="append", default=[], metavar="PATH",
                    help="copy the program PATH and its shared libraries into the test host at their absolute "
                         "paths (a second mvmm build for --script); repeatable")
    if "--" in argv:
        at = argv.index("--")
        args = ap.parse_args(argv[:at])
        args.command = argv[at + 1:]
    else:
        args = ap.parse_args(argv)
        args.command = []
    if args.timeout <= 0:
        ap.error("--timeout must be positive")
    return args


def main(argv):
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    # Ctrl-C, or a kill: the test host's QEMU is stopped on the way out (KeyboardInterrupt in TestHost.run), with a
    # look at where its CPUs were when it is not a person at the console; also when our parent ignored SIGINT.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    args = parse_args(argv)
    config = HostConfig(command=args.command, script=args.script, mvmm=args.mvmm, peer_qemu=args.peer_qemu,
                        files=args.file, binaries=args.binary, disk_images=args.disk_image, timeout=args.timeout,
                        memory=args.memory, cpus=args.host_cpus, append=args.host_append, verbose=args.verbose,
                        timestamps=args.timestamps, interactive=sys.stdin.isatty(), color=sys.stdout.isatty())
    out = sys.stdout.buffer

    def relay(data):
        out.write(data)
        out.flush()

    return TestHost(config).run(relay)
