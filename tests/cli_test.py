#!/usr/bin/env python3
"""mvmm's command line on this host: bad input and unusable hosts give one clear line and exit 2, fast."""

import os
import resource
import subprocess
import tempfile
import time
from pathlib import Path

import guest
from guest import expect


def mvmm(*args):
    start = time.monotonic()
    p = subprocess.run([guest.mvmm_binary(), *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - start


def kernel():
    return guest.guest_image("kernel")


def test_help_and_version():
    code, out, _ = mvmm("--help")
    expect(code == 0 and "--kernel" in out, f"--help: exit {code}\n{out}")
    code, out, _ = mvmm("--version")
    expect(code == 0 and out.startswith("mvmm "), f"--version: exit {code}\n{out}")


def bad_lines(tmp):
    """(arguments after --kernel KERNEL, the option the message must name): files, sizes, keys and
    counts past every limit.  Files named here are in `tmp`; none may be created or changed."""
    t = Path(tmp)
    (t / "notes.txt").write_text("hello\n" * 400)
    (t / "truncated").write_bytes(Path(kernel()).read_bytes()[:4096])
    with open(t / "big-initrd", "wb") as f:
        f.truncate(60 << 20)
    (t / "old.log").write_text("the last run's console\n")
    (t / "disk.img").write_bytes(bytes(1 << 20))
    (t / "api.txt").write_text("not a socket\n")
    (t / "old-report.json").write_text('{"the last run": "report"}\n')
    # qcow2 images: one whose backing file is gone (-u: not checked), one to give huge caches
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-u", "-b", f"{tmp}/gone.qcow2",
                    "-F", "qcow2", f"{tmp}/orphan.qcow2", "1M"], check=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", f"{tmp}/disk.qcow2", "64M"], check=True)
    k = ["--kernel", kernel()]
    return [
        # files
        (["--kernel", "/no/such/kernel"], "--kernel"),
        (["--kernel", f"{tmp}/notes.txt"], "--kernel"),
        (["--kernel", f"{tmp}/truncated"], "--kernel"),
        (["--kernel", tmp], "--kernel"),
        (["--cpus", "1"], "--kernel"),  # no --kernel at all
        (k + ["--initrd", "/no/such/initrd"], "--initrd"),
        (k + ["--initrd", tmp], "--initrd"),
        (k + ["--memory", "64M", "--initrd", f"{tmp}/big-initrd"], "--initrd"),
        (k + ["--cmdline", "x" * 70000], "--cmdline"),
        (k + ["--disk", "path=/no/such/disk.img"], "--disk"),
        (k + ["--disk", f"path={tmp}"], "--disk"),
        (k + ["--serial", "tcp:1"], "--serial"),
        (k + ["--serial", "file:"], "--serial"),
        (k + ["--serial", f"file:{tmp}/no/such/dir/log"], "--serial"),
        (k + ["--serial", f"file:{tmp}"], "--serial"),
        (k + ["--serial", f"file:{tmp}/old.log", "--cpus", "0"], "--cpus"),
        (k + ["--api-socket", f"{tmp}/no/such/dir/api.sock"], "--api-socket"),
        (k + ["--api-socket", f"{tmp}/{'s' * 120}"], "--api-socket"),
        (k + ["--api-socket", f"{tmp}/api.txt"], "--api-socket"),
        (k + ["--api-socket", f"{tmp}/api.sock", "--memory", "12Q"], "--memory"),
        (k + ["--report", f"{tmp}/no/such/dir/report.json"], "--report"),
        (k + ["--report", tmp], "--report"),
        # a report is written only for a command line that was accepted: neither made nor emptied here
        (k + ["--report", f"{tmp}/new-report.json", "--cpus", "0"], "--cpus"),
        (k + ["--report", f"{tmp}/old-report.json", "--memory", "12Q"], "--memory"),
        (["--report", f"{tmp}/old-report.json", "--kernel", f"{tmp}/notes.txt"], "--kernel"),
        # sizes
        (k + ["--memory", "12Q"], "--memory"),
        (k + ["--memory", "64T"], "--memory"),
        (k + ["--memory", "0"], "--memory"),
        (k + ["--memory", "32M"], "--memory"),
        (k + ["--memory", "size="], "--memory"),
        (k + ["--memory", "18446744073709551615K"], "--memory"),
        (k + ["--memory", "size=1G,hugepages=4M"], "--memory"),
        (k + ["--memory", "size=1001M,hugepages=2M"], "--memory"),
        (k + ["--memory", f"size=1G,hugepages=2M,path={tmp}"], "--memory"),
        (k + ["--memory", f"size=1G,path={tmp}/no/such/dir"], "--memory"),
        (k + ["--memory", "size=1G,host-node=1024"], "--memory"),
        (k + ["--memory", "size=1G,host-node=1000"], "--memory"),
        (k + ["--memory", "size=1G,prealloc=on,prealloc-threads=1025"], "--memory"),
        # keys
        (k + ["--memory", "hugepages=2M"], "--memory"),
        (k + ["--memory", "size=1G,prealloc-threads=4"], "--memory"),
        (k + ["--memory", "size=1G,prealloc=on,prealloc-method=fast"], "--memory"),
        (k + ["--memory", "size=1G,shared=maybe"], "--memory"),
        (k + ["--memory", "size=1G,size=2G"], "--memory"),
        (k + ["--memory", "size=1G,,shared=on"], "--memory"),
        (k + ["--memory", "size=1G,colour=blue"], "--memory"),
        (k + ["--disk", "readonly=on"], "--disk"),
        (k + ["--disk", "path="], "--disk"),
        (k + ["--disk", "disk.img"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,path={tmp}/disk.img"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,cache=off"], "cache=off"),
        (k + ["--disk", f"path={tmp}/disk.img,aio=native"], "aio=native"),
        (k + ["--disk", f"path={tmp}/disk.img,readonly=2"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,bus=pcie"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,serial={'s' * 21}"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,serial=caf\u00e9"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,format=vmdk"], "format=vmdk"),
        (k + ["--disk", f"path={tmp}/disk.img,format=qcow2"], "not a qcow2 image"),
        (k + ["--disk", f"path={tmp}/disk.img,format=raw,l2-cache-size=1M"], "l2-cache-size=1M"),
        (k + ["--disk", f"path={tmp}/disk.qcow2,l2-cache-size=12Q"], "l2-cache-size=12Q"),
        (k + ["--disk", f"path={tmp}/disk.qcow2,l2-cache-size=18446744073709551615K"], "l2-cache-size"),
        (k + ["--disk", f"path={tmp}/disk.qcow2,refcount-cache-size=2T"], "cache sizes are too big"),
        (k + ["--disk", f"path={tmp}/disk.qcow2,refcount-cache-size=-1"], "refcount-cache-size=-1"),
        (k + ["--disk", f"path={tmp}/disk.qcow2,cache-clean-interval=soon"], "cache-clean-interval=soon"),
        (k + ["--disk", f"path={tmp}/disk.qcow2,cache-clean-interval=4294967296"], "cache-clean-interval"),
        (k + ["--disk", f"path={tmp}/orphan.qcow2"], f"{tmp}/gone.qcow2"),
        (k + ["--cache-alloc", "slab"], "--cache-alloc"),
        (k + ["--trim-policy", "sometimes"], "--trim-policy"),
        (k + ["--trim-factor", "nan"], "--trim-factor"),
        (k + ["--trim-factor", "-1"], "--trim-factor"),
        (k + ["--log-level", "loud"], "--log-level"),
        (k + ["--no-such-flag"], "--no-such-flag"),
        (k + ["extra"], "extra"),
        # counts
        (k + ["--cpus", "0"], "--cpus"),
        (k + ["--cpus", "256"], "--cpus"),
        (k + ["--cpus", "-1"], "--cpus"),
        (k + ["--cpus", "two"], "--cpus"),
        (k + ["--io-threads", "0"], "--io-threads"),
        (k + ["--io-threads", "65"], "--io-threads"),
        (k + ["--io-threads", "100000"], "--io-threads"),
        (k + ["--vcpu-watchdog", "3601"], "--vcpu-watchdog"),
        (k + ["--vcpu-watchdog", "-5"], "--vcpu-watchdog"),
        (k + ["--disk", f"path={tmp}/disk.img,queues=0"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,queues=65"], "--disk"),
        (k + ["--disk", f"path={tmp}/disk.img,queue-size=0"], "queue-size=0"),
        (k + ["--disk", f"path={tmp}/disk.img,queue-size=3"], "queue-size=3"),
        (k + ["--disk", f"path={tmp}/disk.img,queue-size=2048"], "queue-size=2048"),
        (k + ["--disk", f"path={tmp}/disk.img,queue-size=-1"], "queue-size=-1"),
        (k + ["--disk", f"path={tmp}/disk.img,queue-size=abc"], "queue-size=abc"),
        (k + disks(249), "--disk"),
        (k + disks(32, ",bus=root"), "--disk"),
        (k + disks(31, ",bus=root") + disks(1), "--disk"),
        # virtio-scsi (main's rows: the fragment each message must hold)
        (k + ["--disk", "path=/no/a.img,controller=c9"], "controller=c9"),
        (k + ["--scsi-controller", "id=c0", "--scsi-controller", "id=c0"], "given twice"),
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(2, ",lun=3"), "has LUN 3 already"),
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(1, ",lun=16384"), "lun=16384"),
        (k + ["--scsi-controller", "id=c0,queues=65"], "queues=65"),
        (k + ["--scsi-controller", "id=c0,queue-size=3"], "queue-size=3"),
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(1, ",queue-size=64"), "queue-size=64"),
        (k + ["--scsi-controller", "id=c0", "--root-ports", "248"], "--root-ports"),
        (k + ["--scsi-controller", "id=c0", "--empty-root-ports", "248"], "--root-ports"),  # the old name
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(1, ",target=256"), "target=256"),
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(1, ",target=x"), "target=x"),
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(2, ",target=7,lun=2"), "target 7 has LUN 2"),
        (k + ["--disk", f"path={tmp}/disk.img,target=1"], "needs controller="),
        # block sizes, for blk and scsi alike
        (k + ["--disk", f"path={tmp}/disk.img,logical-block-size=1024"], "logical-block-size"),
        (k + ["--disk", f"path={tmp}/disk.img,logical-block-size=8192"], "logical-block-size"),
        (k + ["--disk", f"path={tmp}/disk.img,logical-block-size=4096,physical-block-size=512"],
         "physical-block-size"),
        (k + ["--disk", f"path={tmp}/disk.img,physical-block-size=3000"], "physical-block-size"),
        (k + ["--scsi-controller", "id=c0"] + scsi_disks(1, ",physical-block-size=131072"),
         "physical-block-size"),
    ]


def snapshot(tmp):
    """Every file under `tmp` with its size and modification time."""
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in Path(tmp).rglob("*")}


def test_bad_input_exits_2_with_one_line():
    """The user-input contract (README): one line naming the option, exit 2, nothing created or
    truncated.  On a PVM host a line that got past the checks would be refused for PVM instead."""
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        cases = bad_lines(tmp)
        before = snapshot(tmp)
        for args, option in cases:
            code, out, _ = mvmm(*args)
            lines = out.strip().splitlines()
            if code != 2 or len(lines) != 1 or option not in lines[0]:
                failures.append(f"{' '.join(args)[:200]}: exit {code}, expected 2 and one line "
                                f"naming {option}:\n{out[:1000]}")
            if snapshot(tmp) != before:
                failures.append(f"{' '.join(args)[:200]}: created or changed files in {tmp}")
                before = snapshot(tmp)
    expect(len(cases) >= 50, f"only {len(cases)} bad lines")
    expect(not failures, f"{len(failures)} of {len(cases)} bad lines broke the contract:\n" +
           "\n".join(failures))


def disks(count, options=""):
    """--disk arguments for `count` images that need not exist: counts are checked before any file."""
    return [a for i in range(count) for a in ("--disk", f"path=/no/such/disk{i}.img{options}")]


def scsi_disks(count, options=""):
    """--disk arguments for `count` LUNs of controller c0 on images that need not exist."""
    return [a for i in range(count) for a in ("--disk", f"path=/no/such/lun{i}.img,controller=c0{options}")]


def on_terminal(env, *args):
    """mvmm's stderr on a pseudo-terminal (as in a user's shell) with `env` added: what it printed."""
    import pty
    master, slave = pty.openpty()
    p = subprocess.Popen([guest.mvmm_binary(), *args], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
                         env={**os.environ, **env}, close_fds=True)
    os.close(slave)
    output = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        output += chunk
    os.close(master)
    p.wait(timeout=30)
    return output.decode(errors="replace")


def test_colour_only_on_a_terminal():
    """Log levels are coloured on a colour terminal only: never in a file or pipe, nor under NO_COLOR."""
    bad = ["--kernel", "/no/such/kernel"]
    escape = "\x1b["
    env = {"TERM": "xterm", "NO_COLOR": ""}
    expect(escape in on_terminal(env, *bad), "no colour on a terminal")
    plain = on_terminal({"TERM": "xterm", "NO_COLOR": "1"}, *bad)
    expect("error" in plain and escape not in plain, f"colour under NO_COLOR: {plain!r}")
    _, piped, _ = mvmm(*bad)
    expect("error" in piped and escape not in piped, f"colour in a pipe: {piped!r}")


def test_many_disks_open_under_a_low_soft_file_limit():
    """mvmm raises its soft limit of open files to the hard one, as QEMU does: under a soft limit of 64, 80 disks
    open, and the run stops at the 81st, a file that does not exist (not at 'Too many open files')."""
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 256:
        raise guest.SkipTest("the hard limit of open files here is below 256")
    with tempfile.TemporaryDirectory() as tmp:
        disks = []
        for i in range(80):
            (Path(tmp) / f"d{i}.img").write_bytes(bytes(4096))
            disks += ["--disk", f"path={tmp}/d{i}.img"]
        low = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        p = subprocess.run([guest.mvmm_binary(), "--kernel", kernel(), *disks, "--disk", f"path={tmp}/missing.img"],
                           capture_output=True, text=True, timeout=30, preexec_fn=low)
        out = p.stdout + p.stderr
        expect(p.returncode == 2 and "missing.img" in out and "Too many open files" not in out,
               f"exit {p.returncode}, expected 2 naming missing.img:\n{out}")


def test_cache_none_opens_a_qcow2_image_and_its_backing_file():
    """cache=none on a qcow2 overlay opens it and its base with O_DIRECT (once refused): the run gets past that disk
    and stops at the next one, a file that does not exist.  Skipped where the filesystem refuses O_DIRECT."""
    with tempfile.TemporaryDirectory(dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None) as tmp:
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", f"{tmp}/base.qcow2", "64M"], check=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", f"{tmp}/base.qcow2", "-F", "qcow2",
                        f"{tmp}/top.qcow2"], check=True)
        code, out, _ = mvmm("--kernel", kernel(), "--disk", f"path={tmp}/top.qcow2,cache=none",
                            "--disk", f"path={tmp}/missing.img")
        if "does not support O_DIRECT" in out:
            raise guest.SkipTest(f"{tmp}: the filesystem refuses O_DIRECT")
        expect(code == 2 and "missing.img" in out and "top.qcow2" not in out,
               f"exit {code}, expected 2 naming missing.img only:\n{out}")


def test_pvm_host_refuses_quickly():
    if not Path("/sys/module/kvm_pvm").exists():
        raise guest.SkipTest("this host's /dev/kvm is not PVM")
    code, out, seconds = mvmm("--kernel", kernel(), "--initrd", guest.guest_image("guest_initrd"))
    expect(code == 2, f"exit {code}, expected 2\n{out}")
    expect("PVM" in out and "mvmm-hostvm" in out, f"message does not explain PVM:\n{out}")
    expect(seconds < 1.0, f"took {seconds:.2f} s, expected under 1 s")


if __name__ == "__main__":
    os.environ.setdefault("MVMM", "build/vmm/mvmm")
    guest.main([test_help_and_version, test_bad_input_exits_2_with_one_line, test_colour_only_on_a_terminal,
                test_many_disks_open_under_a_low_soft_file_limit,
                test_cache_none_opens_a_qcow2_image_and_its_backing_file, test_pvm_host_refuses_quickly])
