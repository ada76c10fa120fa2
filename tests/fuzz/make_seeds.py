#!/usr/bin/env python3
"""Writes the hand-made seeds of every fuzz target into tests/fuzz/corpus/TARGET/seed-*: well-formed inputs in each
target's format (see the comment at the top of fuzz_TARGET.cc) and the regression inputs of issue 18, so a
fuzzer starts from deep in the code.  The rest of each corpus is what fuzzing found and -merge=1 kept.
Run it after changing an input format: python3 tests/fuzz/make_seeds.py"""

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


def u8(v):
    return struct.pack("<B", v)


def u16(v):
    return struct.pack("<H", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v & (1 << 64) - 1)


def write(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"seed-{name}").write_bytes(data)


# --- fuzz_virtqueue ----------------------------------------------------------------------------
DESC_NEXT, DESC_WRITE, DESC_INDIRECT = 1, 2, 4


def desc(addr, length, flags=0, nxt=0):
    return u64(addr) + u32(length) + u16(flags) + u16(nxt)


def virtqueue(name, size, features, chains, indirect_table=b"", pops=4, pokes=b""):
    """RAM: descriptor table at 0, driver area at 0x200, device area at 0x400, indirect table at
    0x800, buffers above 0x1000.  `chains` is a list of descriptor lists; every chain is published."""
    ram = bytearray(0x2000)
    table, heads, index = b"", [], 0
    for chain in chains:
        heads.append(index)
        for i, (addr, length, flags) in enumerate(chain):
            last = i + 1 == len(chain)
            table += desc(addr, length, flags | (0 if last else DESC_NEXT), 0 if last else index + 1)
            index += 1
    ram[0:len(table)] = table
    avail = u16(0) + u16(len(heads)) + b"".join(u16(h) for h in heads)
    ram[0x200:0x200 + len(avail)] = avail
    ram[0x800:0x800 + len(indirect_table)] = indirect_table
    data = u16(size) + u8(features) + u32(0) + u32(0x200) + u32(0x400) + u16(len(ram)) + bytes(ram)
    write("virtqueue", name, data + (pokes or u16(0xffff) + u16(0) + u8(pops)))


def virtqueue_seeds():
    blk_read = [(0x1000, 16, 0), (0x1100, 512, DESC_WRITE), (0x1300, 1, DESC_WRITE)]
    virtqueue("three-buffers", 8, 0, [blk_read])
    virtqueue("two-chains-event-idx", 8, 2, [blk_read, [(0x1400, 16, 0), (0x1500, 1, DESC_WRITE)]])
    indirect = desc(0x1000, 16, DESC_NEXT, 1) + desc(0x1100, 512, DESC_WRITE | DESC_NEXT, 2) + \
        desc(0x1300, 1, DESC_WRITE)
    virtqueue("indirect", 8, 1, [[(0x800, len(indirect), DESC_INDIRECT)]], indirect_table=indirect)
    # The driver publishes a second chain after the first pop: idx 1 -> 2.
    virtqueue("republish", 8, 3, [blk_read, blk_read],
              pokes=u16(0x202) + u16(1) + u8(2) + u16(0x202) + u16(2) + u8(2))
    loop = [(0x1000, 16, 0), (0x1100, 16, 0)]
    virtqueue("loop", 4, 0, [loop], pokes=u16(0x1a) + u16(0) + u8(1))  # desc 1's next -> 0


# --- fuzz_blk ----------------------------------------------------------------------------------
IN, OUT, FLUSH, GET_ID, DISCARD, WRITE_ZEROES = 0, 1, 4, 8, 11, 13


def header(kind, sector=0):
    return u32(kind) + u32(0) + u64(sector)


def readable(data):
    return u16(len(data)) + u8(0) + data


def writable(length):
    return u16(length) + u8(1)


def chain(*buffers):
    return u8(len(buffers)) + b"".join(buffers)


def segment(sector, sectors, flags=0):
    return u64(sector) + u32(sectors) + u32(flags)


def blk_seeds():
    requests = [
        chain(readable(header(IN, 0)), writable(512), writable(1)),
        chain(readable(header(OUT, 2)), readable(bytes(range(256)) * 2), writable(1)),
        chain(readable(header(FLUSH)), writable(1)),
        chain(readable(header(GET_ID)), writable(20), writable(1)),
        chain(readable(header(DISCARD) + segment(8, 8)), writable(1)),
        chain(readable(header(WRITE_ZEROES) + segment(16, 8, 1)), writable(1)),
        chain(readable(header(IN, 2046)), writable(1024), writable(1)),  # past the end of 1 MiB
    ]
    everything = u64(-1)
    write("blk", "all-types", everything + u8(0) + b"".join(requests))
    write("blk", "read-only", everything + u8(1) + b"".join(requests))
    write("blk", "indirect", everything + u8(2) + b"".join(requests))
    write("blk", "write-through", u64(1 << 32 | 1 << 28) + u8(0) + b"".join(requests[:3]))
    write("blk", "split-header", everything + u8(0) +
          chain(readable(header(OUT, 4)[:5]), readable(header(OUT, 4)[5:] + bytes(512)), writable(1)))


# --- fuzz_pci ----------------------------------------------------------------------------------
ECAM, PORTS, MMIO32, MMIO64 = 0, 1, 2, 3
SIZE_BITS = {1: 0, 2: 1, 4: 2, 8: 3}
MMIO32_BASE = 0xc000_0000


def access(where, offset, size, value=None):
    kind = where | SIZE_BITS[size] << 3 | (4 if value is not None else 0)
    return u8(kind) + u32(offset) + (u64(value) if value is not None else b"")


def ecam(bus, dev, fn, reg):
    return (bus << 20) | (dev << 15) | (fn << 12) | reg


def assign_bar(bus, dev, base):
    """As Linux sizes and places a 64-bit BAR 0, then enables memory decoding and bus mastering."""
    at = lambda reg: ecam(bus, dev, 0, reg)
    return b"".join([access(ECAM, at(0x04), 2, 0), access(ECAM, at(0x10), 4, 0xffffffff),
                     access(ECAM, at(0x14), 4, 0xffffffff), access(ECAM, at(0x10), 4),
                     access(ECAM, at(0x14), 4), access(ECAM, at(0x10), 4, base & 0xffffffff),
                     access(ECAM, at(0x14), 4, base >> 32), access(ECAM, at(0x04), 2, 0x6)])


def virtio_init(bus, dev, bar):
    """MSI-X on, two table entries, then virtio_pci_modern's probe with one queue and DRIVER_OK."""
    mmio = lambda off, size, value=None: access(MMIO32, bar - MMIO32_BASE + off, size, value)
    steps = [access(ECAM, ecam(bus, dev, 0, 0x42), 2, 0x8000)]
    for v in range(2):
        steps += [mmio(0x4000 + 16 * v, 4, 0xfee0_0000), mmio(0x4008 + 16 * v, 4, 0x40 + v),
                  mmio(0x400c + 16 * v, 4, 0)]
    steps += [mmio(0x14, 1, 0), mmio(0x14, 1, 1), mmio(0x14, 1, 3), mmio(0x00, 4, 1), mmio(0x04, 4),
              mmio(0x08, 4, 1), mmio(0x0c, 4, 1), mmio(0x14, 1, 11), mmio(0x14, 1),
              mmio(0x10, 2, 0), mmio(0x16, 2, 0), mmio(0x18, 2, 16), mmio(0x1a, 2, 1),
              mmio(0x20, 8, 0x1000), mmio(0x28, 8, 0x2000), mmio(0x30, 8, 0x3000), mmio(0x1c, 2, 1),
              mmio(0x14, 1, 15), mmio(0x3000, 2, 0), mmio(0x2000, 8), mmio(0x1000, 1), mmio(0x14, 1, 0)]
    return b"".join(steps)


def pci_seeds():
    write("pci", "root-bus-function", assign_bar(0, 1, MMIO32_BASE) + virtio_init(0, 1, MMIO32_BASE))
    port = lambda reg, size, value=None: access(ECAM, ecam(0, 2, 0, reg), size, value)
    behind = MMIO32_BASE + 0x100000
    bridge = [port(0x18, 4, 1 << 8 | 1 << 16), port(0x20, 4, (behind >> 16) | (behind >> 16) << 16),
              port(0x04, 2, 0x6), access(ECAM, ecam(1, 0, 0, 0), 4)]
    write("pci", "behind-root-port", b"".join(bridge) + assign_bar(1, 0, behind) + virtio_init(1, 0, behind))
    legacy = [access(PORTS, 0, 4, 0x8000_0800), access(PORTS, 4, 4), access(PORTS, 0, 4, 0x8000_0810),
              access(PORTS, 4, 4, 0xffffffff), access(PORTS, 4, 4), access(PORTS, 1, 1, 0x6)]
    write("pci", "legacy-ports", b"".join(legacy))


# --- fuzz_root_port ----------------------------------------------------------------------------
CFG_WRITE, CFG_READ, PLUG, UNPLUG = 0, 1, 2, 3
SLOT_CONTROL, SLOT_STATUS, MSI = 0x58, 0x5a, 0x7c  # the PCIe capability at 0x40, MSI after it
ABPE, CCIE, HPIE, PIC_ON, PIC_OFF, POWER_OFF, DLLSCE = 1, 1 << 4, 1 << 5, 1 << 8, 3 << 8, 1 << 10, 1 << 12


def port_step(op, port, offset=0, size=1, value=None):
    head = u8(op | SIZE_BITS[size] << 2) + u8(port) + u16(offset)
    return head + (u32(value) if op == CFG_WRITE else b"")


def root_port_seeds():
    """pciehp's life on port 2: numbers and MSI, notifications, a plug, power on, the button, power off."""
    setup = []
    for port in range(3):
        setup += [port_step(CFG_WRITE, port, 0x18, 4, (1 + port) << 8 | (1 + port) << 16),
                  port_step(CFG_WRITE, port, MSI + 4, 4, 0xfee0_0000),
                  port_step(CFG_WRITE, port, MSI + 12, 2, 0x40 + port),
                  port_step(CFG_WRITE, port, MSI + 2, 2, 1),
                  port_step(CFG_WRITE, port, SLOT_CONTROL, 2, ABPE | CCIE | HPIE | DLLSCE | PIC_OFF | POWER_OFF),
                  port_step(CFG_WRITE, port, SLOT_STATUS, 2, 0x11f)]
    enable = ABPE | CCIE | HPIE | DLLSCE
    cycle = [port_step(PLUG, 2), port_step(CFG_READ, 2, SLOT_STATUS, 2),
             port_step(CFG_WRITE, 2, SLOT_STATUS, 2, 0x11f), port_step(CFG_WRITE, 2, SLOT_CONTROL, 2, enable | PIC_ON),
             port_step(CFG_READ, 0x82, 0, 4), port_step(UNPLUG, 2),
             port_step(CFG_WRITE, 2, SLOT_CONTROL, 2, enable | PIC_ON | POWER_OFF),
             port_step(CFG_WRITE, 2, SLOT_CONTROL, 2, enable | PIC_OFF | POWER_OFF)]
    write("root_port", "pciehp-cycle", b"".join(setup + cycle + cycle))
    write("root_port", "boot-disk-released", b"".join(setup) + port_step(UNPLUG, 0) +
          port_step(CFG_WRITE, 0, SLOT_CONTROL, 2, POWER_OFF) + port_step(PLUG, 0))


# --- fuzz_api ----------------------------------------------------------------------------------
def api_seeds():
    lines = {
        "query-status": '{"execute": "query-status"}',
        "query-memory-id": '{"execute": "query-memory", "id": 7}',
        "trim-memory": '{"execute": "trim-memory", "arguments": {}}',
        "quit": '{"execute": "quit", "id": "q"}',
        "unknown": '{"execute": "no-such", "id": {"tag": [1, 2.5, null, true]}}',
        "huge-number": '{"execute": "query-status", "id": 1e999}',  # issue 18
        "not-object": '[{"execute": "quit"}]',
        "escapes": '{"execute": "query-\\u0073tatus", "id": "\\ud83d\\ude00"}',
    }
    for name, line in lines.items():
        write("api", name, line.encode())


# --- fuzz_bzimage ------------------------------------------------------------------------------
def bzimage(kernel_bytes=4096, pref_address=0x1000000, init_size=0x800000, version=0x020f):
    """A minimal bzImage as vmm/tests/fake_bzimage.h builds it."""
    file = bytearray(b"\x90" * (5 * 512 + kernel_bytes))
    fields = {0x1f1: ("B", 4), 0x1f4: ("I", kernel_bytes // 16), 0x1fe: ("H", 0xaa55),
              0x202: ("I", 0x53726448), 0x206: ("H", version), 0x211: ("B", 1),
              0x22c: ("I", 0x7fffffff), 0x236: ("H", 1), 0x238: ("I", 2047),
              0x258: ("Q", pref_address), 0x260: ("I", init_size)}
    for offset, (fmt, value) in fields.items():
        struct.pack_into("<" + fmt, file, offset, value)
    return bytes(file)


def bzimage_input(initrd_size, low_ram_end, cmdline, kernel):
    return u32(initrd_size) + u32(low_ram_end) + u16(len(cmdline)) + cmdline + kernel


def bzimage_seeds():
    write("bzimage", "with-initrd", bzimage_input(10000, 64 << 20, b"console=ttyS0", bzimage()))
    write("bzimage", "no-initrd", bzimage_input(0, 32 << 20, b"", bzimage(8192)))
    write("bzimage", "too-big-initrd", bzimage_input(4 << 20, 24 << 20, b"quiet", bzimage()))
    # issue 18: pref_address + init_size wrapped past 2^64 and put the initrd over the kernel.
    write("bzimage", "wrapping-pref-address",
          bzimage_input(4096, 64 << 20, b"", bzimage(pref_address=(1 << 64) - 0x1000)))
    write("bzimage", "old-protocol", bzimage_input(4096, 64 << 20, b"", bzimage(version=0x0206)))


# --- fuzz_options ------------------------------------------------------------------------------
def options_seeds():
    lines = {
        "plain": "512M\npath=/tmp/disk.img",
        "all-keys": "size=2G,hugepages=2M,shared=on,prealloc=on,prealloc-threads=4,"
                    "prealloc-method=populate,host-node=0\n"
                    "path=/tmp/d.img,readonly=on,serial=abc-123,queues=4,bus=root",
        "file-backed": "size=1G,path=/dev/hugepages,hugepages=1G\npath=a,bus=rootport",
        "mistakes": "size=1G,,size=2G\npath=,queues=0,serial=" + "x" * 30,
        "huge": "size=18446744073709551615K\npath=x,queues=65536",
        "queue-size": "512M\npath=/tmp/d.img,queues=2,queue-size=64",
        "queue-size-mistakes": "512M\npath=x,queue-size=96",
    }
    for name, text in lines.items():
        write("options", name, text.encode())


# --- fuzz_scsi_cdb -----------------------------------------------------------------------------
def be(value, size):
    return value.to_bytes(size, "big")


def scsi(name, cdb, blocks=2048, read_only=False, parameter_list=b""):
    write("scsi_cdb", name, u64(blocks) + u8(read_only) + u8(len(cdb)) + bytes(cdb) + parameter_list)


def unmap_list(*ranges):
    descriptors = b"".join(be(lba, 8) + be(count, 4) + bytes(4) for lba, count in ranges)
    return be(6 + len(descriptors), 2) + be(len(descriptors), 2) + bytes(4) + descriptors


def scsi_seeds():
    scsi("test-unit-ready", bytes(6))
    scsi("inquiry-vpd-b0", [0x12, 1, 0xb0, 0, 0xff, 0])
    scsi("mode-sense-all", [0x1a, 0, 0x3f, 0, 0xff, 0])
    scsi("read-10", [0x28, 0] + list(be(100, 4)) + [0] + list(be(8, 2)) + [0])
    scsi("write-16-fua", [0x8a, 8] + list(be(2040, 8)) + list(be(8, 4)) + [0, 0])
    scsi("read-16-wrapping", [0x88, 0] + list(be((1 << 64) - 1, 8)) + list(be(2, 4)) + [0, 0])
    scsi("write-10-read-only", [0x2a, 0] + list(be(0, 4)) + [0] + list(be(1, 2)) + [0], read_only=True)
    scsi("read-capacity-16", [0x9e, 0x10] + [0] * 8 + list(be(32, 4)) + [0, 0], blocks=1 << 40)
    scsi("report-luns", [0xa0, 0, 0] + [0] * 3 + list(be(4096, 4)) + [0, 0])
    scsi("write-same-16-unmap", [0x93, 8] + list(be(8, 8)) + list(be(64, 4)) + [0, 0])
    scsi("unmap", [0x42, 0] + [0] * 5 + list(be(24, 2)) + [0], parameter_list=unmap_list((0, 8)))
    scsi("unmap-wrapping", [0x42, 0] + [0] * 5 + list(be(40, 2)) + [0],
         parameter_list=unmap_list((8, 8), ((1 << 64) - 4, 8)))


# --- fuzz_qcow2 --------------------------------------------------------------------------------
def qcow2_seeds():
    """Small images made by qemu-img (Debian's qemu-utils), mostly with 512-byte clusters so each
    is a few KiB: every format variant the engine reads, with data, zero and compressed clusters,
    a snapshot and a backing file name."""
    if not shutil.which("qemu-img"):
        print("make_seeds.py: qemu-img not found, fuzz_qcow2 seeds not written")
        return
    with tempfile.TemporaryDirectory() as tmp:
        def image(name, options, size="64K", io=(), source=None, backing=None, snapshot=False):
            path = f"{tmp}/{name}.qcow2"
            if source:
                Path(f"{tmp}/source.raw").write_bytes(source)
                subprocess.run(["qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", "-o", options,
                                f"{tmp}/source.raw", path], check=True)
            else:
                extra = ["-u", "-b", backing, "-F", "qcow2"] if backing else []
                subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-o", options, *extra, path,
                                size], check=True)
            for command in io:
                subprocess.run(["qemu-io", "-f", "qcow2", "-c", command, path], check=True,
                               stdout=subprocess.DEVNULL)
            if snapshot:
                subprocess.run(["qemu-img", "snapshot", "-c", "s", path], check=True)
            write("qcow2", name, Path(path).read_bytes())

        writes = ("write -P 0x61 0 1536", "write -P 0x62 20K 600", "write -z 1024 512")
        image("v3-512-empty", "cluster_size=512")
        image("v3-512-data", "cluster_size=512", io=writes)
        image("v2-512-data", "compat=0.10,cluster_size=512", io=writes[:2])
        image("v3-512-refcount1", "cluster_size=512,refcount_bits=1", io=writes)
        image("v3-512-refcount64", "cluster_size=512,refcount_bits=64", io=writes)
        image("v3-512-compressed", "cluster_size=512", source=bytes(range(256)) * 8 + bytes(2048))
        image("v3-512-snapshot", "cluster_size=512", io=writes[:1], snapshot=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", f"{tmp}/base.qcow2", "64K"], check=True)
        image("v3-512-backing", "cluster_size=512", io=writes[1:2], backing="base.qcow2")
        image("v3-4k-data", "cluster_size=4096", io=writes)


# --- fuzz_scsi and fuzz_scsi_control ----------------------------------------------------------
def scsi_lun(target, lun):
    return bytes([1, target, 0x40 | lun >> 8, lun & 0xff, 0, 0, 0, 0])


def scsi_command(target, lun, cdb, out=b"", data_in=0, tag=0):
    """A command chain: virtio_scsi_cmd_req with a 32-byte CDB, data-out, response, data-in."""
    request = scsi_lun(target, lun) + u64(tag) + bytes(3) + bytes(cdb).ljust(32, b"\0")
    buffers = [readable(request)] + ([readable(out)] if out else []) + [writable(108)]
    return chain(*buffers, *([writable(data_in)] if data_in else []))


def tmf(subtype, target, lun, tag=0):
    return chain(readable(u32(0) + u32(subtype) + scsi_lun(target, lun) + u64(tag)), writable(1))


def scsi_request_seeds():
    layout = u8(0) + u32(32) + u32(96)
    read10 = [0x28, 0] + list(be(2, 4)) + [0] + list(be(1, 2)) + [0]
    write10 = [0x2a, 0] + list(be(2, 4)) + [0] + list(be(1, 2)) + [0]
    write("scsi", "scan", layout + scsi_command(0, 0, [0x03, 0, 0, 0, 18, 0], data_in=18)
          + scsi_command(0, 0, [0x12, 0, 0, 0, 96, 0], data_in=96)
          + scsi_command(0, 0, [0xa0, 0, 0, 0, 0, 0] + list(be(256, 4)) + [0, 0], data_in=256)
          + scsi_command(3, 0, [0x9e, 0x10] + [0] * 8 + list(be(32, 4)) + [0, 0], data_in=32))
    write("scsi", "read-write", layout + scsi_command(0, 0, write10, out=bytes(range(256)) * 2)
          + scsi_command(0, 0, read10, data_in=512)
          + scsi_command(0, 1, [0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0], out=bytes(4096)))
    write("scsi", "verify-mode-select", layout
          + scsi_command(0, 0, [0x2f, 2, 0, 0, 0, 2, 0, 0, 1, 0], out=bytes(512))
          + scsi_command(0, 0, [0x15, 0x10, 0, 0, 24, 0],
                         out=bytes([0, 0, 0x10, 0]) + bytes([8, 18]) + bytes(18))
          + scsi_command(0, 0, [0xa3, 0x0c, 1, 0x28, 0, 0, 0, 0, 1, 0, 0, 0], data_in=256))
    write("scsi", "bad-target-and-short-header", layout + scsi_command(9, 0, [0x00])
          + chain(readable(bytes(10)), writable(108)))
    write("scsi_control", "reset-with-queued-commands", u8(2)
          + scsi_command(0, 0, read10, data_in=512, tag=1) + scsi_command(0, 1, [0x00], tag=2)
          + tmf(5, 0, 0) + tmf(0, 0, 1, tag=2) + tmf(6, 0, 0, tag=1) + tmf(4, 3, 0)
          + chain(readable(u32(1) + scsi_lun(0, 0) + u32(0xff)), writable(5)))


if __name__ == "__main__":
    for seeds in (virtqueue_seeds, blk_seeds, pci_seeds, root_port_seeds, api_seeds, bzimage_seeds,
                  options_seeds, scsi_seeds, scsi_request_seeds, qcow2_seeds):
        seeds()
