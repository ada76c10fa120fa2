#!/usr/bin/env python3
"""Real guest boots with virtio-scsi: 60 LUNs on one controller behind a root port, with 30 more empty root ports
(the seeds' 60 disks + 31 root ports). The guest sees every LUN with its size and identity (INQUIRY, VPD 80h/83h,
READ CAPACITY, as sysfs shows them), writes a pattern naming the LUN's serial to each, and after mvmm exits each
pattern is in its own image file; the read-only LUN refuses the write and its file is unchanged; a second boot
with the LUNs given in the opposite order (so other LUN numbers and sd names) finds the same /dev/disk/by-id
names."""

import re
import tempfile
from pathlib import Path

import guest
from guest import Run, expect, guest_args

MiB = 1 << 20
LUNS = 60
READONLY = 42  # this LUN is read-only, on an image the test fills and checks
EMPTY_ROOT_PORTS = 30


def serial(i):
    return f"mvmm-lun-{i:02d}"


def size(i):
    return MiB + i * 64 * 1024


def scsi_run(scratch, readonly_image, order, explicit_luns):
    """One boot with the LUNs of `order` (indexes), serial and size from the index; LUN numbers lun=index when
    `explicit_luns`, else the lowest free (the position in `order`)."""
    images = {i: f"{scratch}/lun{i:02d}.img" for i in range(LUNS) if i != READONLY}
    extra = ["--scsi-controller", "id=c0", "--empty-root-ports", str(EMPTY_ROOT_PORTS)]
    for i in order:
        path = readonly_image if i == READONLY else images[i]
        extra += ["--disk", f"path={path},controller=c0,serial={serial(i)}"
                  + (f",lun={i}" if explicit_luns else "") + (",readonly=on" if i == READONLY else "")]
    # Once mvmm exited, where it ran: the start of every image, in hex.
    read_back = "\n".join(f"printf 'READ-BACK %s ' {p}; head -c 64 {p} | od -An -tx1 -v | tr -d ' \\n'; echo"
                          for p in images.values())
    return Run(guest_args("mvmm.script=scsi-check", extra=extra),
               scratch_images={images[i]: size(i) for i in images}, disk_images=[readonly_image],
               after=read_back), images


def heads(run):
    """{image path: its first bytes} from the run's read-back lines."""
    return {path: bytes.fromhex(head) for path, head in re.findall(r"READ-BACK (\S+) ([0-9a-f]*)", run.after_output)}


def scsi_disks(run):
    """{serial: marker} of the guest's scsi-disk markers."""
    found = {d["serial"]: d for _, d in run.markers("scsi-disk")}
    expect(run.code == 0, f"mvmm exited {run.code}", run)
    expect(len(found) == LUNS and len(run.markers("scsi-disk")) == LUNS,
           f"guest saw {len(run.markers('scsi-disk'))} SCSI disks with serials {sorted(found)[:5]}..., "
           f"expected {LUNS}", run)
    return found


def check_identity(run, disks, lun_of):
    for i in range(LUNS):
        d = disks.get(serial(i))
        expect(d is not None, f"no SCSI disk with serial {serial(i)}", run)
        expect((d["vendor"], d["model"], d["rev"]) == ("MVMM", "VIRTUAL_DISK", "0001"),
               f"{serial(i)}: INQUIRY says {d['vendor']} {d['model']} {d['rev']}", run)
        expect(int(d["size_bytes"]) == (4 * MiB if i == READONLY else size(i)) and d["block_size"] == "512",
               f"{serial(i)}: READ CAPACITY gives {d['size_bytes']} bytes in {d['block_size']}-byte blocks", run)
        expect(d["hctl"].split(":")[-1] == str(lun_of(i)), f"{serial(i)} is at {d['hctl']}, not LUN {lun_of(i)}", run)
        naa = d["by_id"].split(",")[0].removeprefix("scsi-3")
        # udev's by-id names come from the locally assigned NAA; the kernel's own wwid skips locally assigned NAAs
        # and takes the T10 vendor designator (vendor padded to 8, spaces shown as '_', then the serial).
        expect(len(naa) == 16 and naa[0] == "3" and d["wwid"] == f"t10.MVMM____{serial(i)}",
               f"{serial(i)}: VPD 83h NAA {naa}, kernel wwid {d['wwid']}", run)
        expect(d["ro"] == ("1" if i == READONLY else "0") and d["written"] == ("0" if i == READONLY else "1"),
               f"{serial(i)}: ro={d['ro']} written={d['written']}", run)
    by_id = [d["by_id"] for d in disks.values()]
    expect(len(set(by_id)) == LUNS, "two LUNs share a by-id name", run)


def test_sixty_luns_behind_root_ports():
    with tempfile.TemporaryDirectory() as tmp:
        readonly_images = [f"{tmp}/readonly{n}.img" for n in range(2)]
        for path in readonly_images:
            Path(path).write_bytes(b"ORIGINAL" + bytes(4 * MiB - 8))
        scratch = tempfile.mkdtemp(prefix="mvmm-scsi-")
        forward, images = scsi_run(f"{scratch}/a", readonly_images[0], range(LUNS), explicit_luns=True)
        backward, _ = scsi_run(f"{scratch}/b", readonly_images[1], range(LUNS - 1, -1, -1), explicit_luns=False)
        guest.run_all([forward, backward], timeout=900)

        first = scsi_disks(forward)
        check_identity(forward, first, lun_of=lambda i: i)
        sizes = sorted(int(d["size_bytes"]) for _, d in forward.markers("disk"))
        expect(sizes == sorted(4 * MiB if i == READONLY else size(i) for i in range(LUNS)),
               f"the guest's block devices have sizes {sizes[:5]}...", forward)
        written = heads(forward)
        for i, path in images.items():
            head = written.get(path, b"")
            expect(head.startswith(f"MVMM-PATTERN-{serial(i)}\n".encode()),
                   f"{path} starts with {head[:32]!r}, not the pattern the guest wrote to {serial(i)}", forward)
        for path in readonly_images:
            expect(Path(path).read_bytes()[:8] == b"ORIGINAL", f"the read-only image {path} changed", forward)

        second = scsi_disks(backward)
        check_identity(backward, second, lun_of=lambda i: LUNS - 1 - i)
        for s, d in first.items():
            expect(second[s]["by_id"] == d["by_id"] and second[s]["wwid"] == d["wwid"],
                   f"{s}: by-id {d['by_id']} in one boot, {second[s]['by_id']} in the other", backward)
        moved = sum(first[s]["name"] != second[s]["name"] for s in first)
        expect(moved > 0, "both boots gave every LUN the same sd name: the order did not change", backward)


if __name__ == "__main__":
    guest.main([test_sixty_luns_behind_root_ports])
