#!/usr/bin/env python3
"""Real guest boots on qcow2 overlays made by qemu-img (`create -f qcow2 -b BASE -F FORMAT`) of a qcow2 base, a raw
base and a base of compressed clusters (`convert -c`), on virtio-blk and on a SCSI LUN: the guest reads the base's
data and what qemu-io wrote into an overlay, and writes a pattern per disk; after mvmm exits, `qemu-img check` is
clean and `qemu-img convert -O raw` shows each pattern. Then one boot with 64 overlays of one base
(l2-cache-size=4M), whose boot report has their caches; and one boot with a qcow2 image opened with cache=none
(O_DIRECT), checked the same way.

  tests/qcow2_test.py [TEST_NAME]...   (MVMM, MVMM_CTL and PYTHONPATH=tools as meson test sets them; no name: all)"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import guest
from guest import Run, expect, guest_args

MiB = 1 << 20
BASE_BYTE, QEMU_IO_BYTE = 0x42, 0x5A  # 64 KiB of each: the base's at 1 MiB, qemu-io's in one overlay at 2 MiB


def md5(data):
    return hashlib.md5(data).hexdigest()


def qemu_img(*args):
    subprocess.run(["qemu-img", *args], check=True, capture_output=True)


def make_bases(d):
    """base.qcow2 with 64 KiB of BASE_BYTE at 1 MiB (written by qemu-io), the same as raw and as compressed
    clusters."""
    qemu_img("create", "-q", "-f", "qcow2", f"{d}/base.qcow2", "16M")
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", f"write -P {BASE_BYTE} 1M 64k", f"{d}/base.qcow2"],
                   check=True, capture_output=True)
    qemu_img("convert", "-O", "raw", f"{d}/base.qcow2", f"{d}/base.raw")
    qemu_img("convert", "-c", "-O", "qcow2", f"{d}/base.qcow2", f"{d}/base-c.qcow2")
    return [f"{d}/base.qcow2", f"{d}/base.raw", f"{d}/base-c.qcow2"]


def direct_image(path):
    """For cache=none: a qcow2 image with no backing file, with what image-check reads on an overlay of base.qcow2
    that qemu-io wrote to, padded with zeroes to 32 MiB. In the test host it is one of its block devices (its tmpfs
    has no O_DIRECT), which cannot grow: the padding is room for the guest's new clusters."""
    qemu_img("create", "-q", "-f", "qcow2", path, "16M")
    for byte, offset in ((BASE_BYTE, "1M"), (QEMU_IO_BYTE, "2M")):
        subprocess.run(["qemu-io", "-f", "qcow2", "-c", f"write -P {byte} {offset} 64k", path],
                       check=True, capture_output=True)
    os.truncate(path, 32 * MiB)
    return path


def overlay(path, base, base_format):
    qemu_img("create", "-q", "-f", "qcow2", "-b", base, "-F", base_format, path)
    return path


# Run where mvmm ran, after it exited: per overlay the checker's verdict and what its raw conversion holds.
CHECK_OVERLAYS = r"""
for f in {overlays}; do
  qemu-img check -q "$f" >/dev/null 2>&1; echo "CHECK $f $?"
  qemu-img convert -O raw "$f" "$f.raw"
  echo "HEAD $f $(head -c 64 "$f.raw" | head -n 1)"
  echo "AT1M $f $(dd if="$f.raw" bs=64k skip=16 count=1 2>/dev/null | md5sum)"
  echo "AT3M $f $(dd if="$f.raw" bs=512 skip=6145 count=128 2>/dev/null | md5sum)"
  rm -f "$f.raw"
done
"""


def check_after(run, overlays, tag, out):
    """Every overlay passes qemu-img check and converts to raw with the base's data and its guest disk's pattern
    and letter block; no two overlays hold the same pattern. `out`: what CHECK_OVERLAYS printed."""
    heads = set()
    for f in overlays:
        check = re.search(rf"^CHECK {re.escape(f)} (\d+)", out, re.M)
        expect(check and check.group(1) == "0", f"qemu-img check {f}: {check and check.group(1)}\n{out[-2000:]}",
               run)
        head = re.search(rf"^HEAD {re.escape(f)} MVMM-PATTERN-(\w+)-{tag}$", out, re.M)
        expect(head, f"{f} converted to raw does not start with the guest's pattern:\n{out[-2000:]}", run)
        disk = head.group(1)
        heads.add(disk)
        at1m = re.search(rf"^AT1M {re.escape(f)} (\w+)", out, re.M)
        expect(at1m and at1m.group(1) == md5(bytes([BASE_BYTE]) * 65536), f"{f}: the base's data is gone", run)
        at3m = re.search(rf"^AT3M {re.escape(f)} (\w+)", out, re.M)
        expect(at3m and at3m.group(1) == md5(disk[2].encode() * 65536),
               f"{f}: the guest's 64 KiB at 3 MiB + 512 on {disk} did not reach it", run)
    expect(len(heads) == len(overlays), f"{len(overlays)} overlays hold {len(heads)} patterns: {heads}", run)


def check_guest_reads(run, count, qemu_io_disks):
    """The guest read the base's data on every disk, and qemu-io's bytes on `qemu_io_disks` of them."""
    reads = [d for _, d in run.markers("image-read")]
    expect(len(reads) == count, f"the guest read {len(reads)} disks, expected {count}", run)
    base, zeroes, written = (md5(bytes([b]) * 65536) for b in (BASE_BYTE, 0, QEMU_IO_BYTE))
    expect(all(d["at1m"] == base for d in reads), f"a disk misread the base: {reads}", run)
    expect(sorted(d["at2m"] for d in reads) == sorted([written] * qemu_io_disks + [zeroes] * (count - qemu_io_disks)),
           f"the guest did not read qemu-io's data where it was written: {reads}", run)
    ok = [d for _, d in run.markers("image-written") if d.get("ok") == "1"]
    expect(len(ok) == count and run.code == 0, f"mvmm exited {run.code}; {len(ok)} of {count} disks written", run)


def test_guest_uses_overlays_qemu_img_made():
    if not shutil.which("qemu-img"):
        raise guest.SkipTest("qemu-img is not installed (qemu-utils)")
    d = tempfile.mkdtemp(prefix="mvmm-qcow2-")
    try:
        bases = make_bases(d)
        qcow2_base, raw_base, compressed_base = bases
        chain = [overlay(f"{d}/on-qcow2.qcow2", qcow2_base, "qcow2"),
                 overlay(f"{d}/on-raw.qcow2", raw_base, "raw"),
                 overlay(f"{d}/on-compressed.qcow2", compressed_base, "qcow2")]
        lun = overlay(f"{d}/lun.qcow2", qcow2_base, "qcow2")
        subprocess.run(["qemu-io", "-f", "qcow2", "-c", f"write -P {QEMU_IO_BYTE} 2M 64k", chain[0]],
                       check=True, capture_output=True)
        disks = [a for p in chain for a in ("--disk", f"path={p},l2-cache-size=1M")]
        mixed = Run(guest_args("mvmm.script=image-check mvmm.pattern=mixed",
                               extra=[*disks, "--scsi-controller", "id=c0", "--disk", f"path={lun},controller=c0"]),
                    files=bases, binaries=[shutil.which("qemu-img")],
                    after=CHECK_OVERLAYS.format(overlays=" ".join([*chain, lun])))

        many = [overlay(f"{d}/many{i:02}.qcow2", qcow2_base, "qcow2") for i in range(64)]
        report = f"{d}/report.json"
        wide = Run(guest_args("mvmm.script=image-check mvmm.pattern=wide",
                              extra=[*(a for p in many for a in ("--disk", f"path={p},l2-cache-size=4M")),
                                     "--cache-alloc", "heap", "--report", report]),
                   files=[qcow2_base], binaries=[shutil.which("qemu-img")],
                   after=CHECK_OVERLAYS.format(overlays=" ".join(many)) + f"echo REPORT; cat {report}\n")
        direct_path = direct_image(f"{d}/direct.qcow2")
        direct = Run(guest_args("mvmm.script=image-check mvmm.pattern=direct",
                                extra=["--disk", f"path={direct_path},cache=none"]), disk_images=[direct_path])
        guest.run_all([mixed, wide, direct], timeout=1800)

        check_guest_reads(mixed, 4, 1)
        check_after(mixed, [*chain, lun], "mixed", mixed.after_output)
        check_guest_reads(wide, 64, 0)
        check_after(wide, many, "wide", wide.after_output)
        check_guest_reads(direct, 1, 1)
        checked = subprocess.run(["sh", "-c", CHECK_OVERLAYS.format(overlays=direct_path)], capture_output=True,
                                 text=True, check=True)
        check_after(direct, [direct_path], "direct", checked.stdout)
        doc = json.loads(wide.after_output.split("REPORT\n", 1)[1])
        caches = doc["disk_caches"]
        expect(len(caches["images"]) == 64 and all(i["format"] == "qcow2" for i in caches["images"]),
               f"the report's disk caches: {caches['images'][:2]}...", wide)
        expect(caches["allocated_bytes"] > 0 and all(i["l2"]["misses"] > 0 for i in caches["images"]),
               f"the caches were never used: {caches['images'][0]}", wide)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    guest.main([test_guest_uses_overlays_qemu_img_made])
