"""What a benchmark boots: the guest (kernel, initrd, command line, the user's disk images) and the machine
configuration (disks, memory, CPUs), rendered as the same machine for mvmm and for QEMU."""

from dataclasses import dataclass

GUEST_MEMORY, GUEST_CPUS = "512M", 2
GUEST_CMDLINE = "console=ttyS0 quiet mvmm.script=markers"
DISK_SIZE_MIB = 64  # the sparse disks of --disks
DISK_DIR = "/tmp/boot-bench"  # where the runs' disks are made (boot_bench_runner.sh's BB_DIR)
# The disks' format: raw images, or qcow2 overlays of one filled qcow2 base (bb_overlays in boot_bench_runner.sh).
DISK_FORMATS = ("raw", "qcow2")
QEMU_SINGLE_SLOTS = range(2, 31)  # q35's free slots 2..30 (0: host bridge, 1: VGA, 31: ICH9)
MAX_DISKS = len(QEMU_SINGLE_SLOTS) * 8
QEMU_FIRMWARE = {"seabios": [], "qboot": ["-bios", "/usr/share/qemu/qboot.rom"]}
DISK_BUSES = ("rootport", "root")  # each disk behind its own PCIe root port, or on bus 0
# virtio-blk, or "scsi": the disks (and --disk-image ones) are LUNs of one virtio-scsi controller, behind a root port
# (bus=rootport) with SCSI_ROOT_PORTS - 1 empty ones beside it: the seeds' case is 60 SCSI disks and 31 root ports.
DISK_KINDS = ("blk", "scsi")
SCSI_ROOT_PORTS = 31
HUGEPAGE_SIZES = ("2M",)  # reserved in the test host by bb_hugepages (its default size)
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_bytes(text):
    """'512M' -> bytes; ValueError otherwise."""
    text = text.strip().upper()
    if text[-1:] in UNITS:
        return int(text[:-1]) * UNITS[text[-1]]
    return int(text)


@dataclass(frozen=True)
class Guest:
    kernel: str
    initrd: str = None
    cmdline: str = GUEST_CMDLINE
    images: tuple = ()  # the user's raw disk images, given read-only to every VMM, where the VMM runs


@dataclass(frozen=True)
class Machine:
    """One configuration of the matrix."""
    disks: int = 0  # sparse raw disks made where the VMM runs
    bus: str = "rootport"
    kind: str = "blk"
    memory: str = GUEST_MEMORY
    hugepages: str = None  # None (normal pages), "2M" or "1G"
    prealloc: bool = False
    cpus: int = GUEST_CPUS
    queues: int = None  # request queues per virtio-blk disk, the same for every VMM (None: each VMM's default)
    format: str = "raw"  # of the --disks disks: "raw" or "qcow2" (overlays of one base)
    l2_cache_size: str = None  # qcow2: l2-cache-size= for every VMM (None: each VMM's default)
    delay_ms: int = None  # raw disks behind dm-delay holding each request this long (bb_delay; None: the files)

    def label(self, axes=None):
        """A short name from the axes that vary across the matrix (all of them when axes is None)."""
        parts = {"disks": f"{self.disks}{'' if self.bus == 'rootport' else '-root'} disk"
                          f"{'' if self.disks == 1 else 's'}" + ("" if self.kind == "blk" else f" {self.kind}"),
                 "memory": self.memory, "hugepages": f"hugepages {self.hugepages or 'none'}",
                 "prealloc": "prealloc" if self.prealloc else "no prealloc", "cpus": f"{self.cpus} cpu",
                 "format": self.format}
        chosen = [parts[a] for a in (axes if axes is not None else parts) if a in parts]
        return ", ".join(chosen) or parts["disks"]

    def hugepages_needed(self):
        """Pages of the hugepage size this machine's RAM takes (0 without hugepages)."""
        return size_bytes(self.memory) // size_bytes(self.hugepages) if self.hugepages else 0


def varying_axes(machines):
    """The Machine fields whose value differs across the matrix ('disks' also for bus and kind)."""
    axes = []
    for axis, fields in (("disks", ("disks", "bus", "kind")), ("memory", ("memory",)),
                         ("hugepages", ("hugepages",)), ("prealloc", ("prealloc",)), ("cpus", ("cpus",)),
                         ("format", ("format",))):
        if len({tuple(getattr(m, f) for f in fields) for m in machines}) > 1:
            axes.append(axis)
    return axes


def disk_path(machine, i, disk_dir=DISK_DIR):
    """The i-th of the machine's --disks disks where the VMM runs."""
    if machine.delay_ms:
        return delayed_disk(i)
    return f"{disk_dir}/" + (f"overlay{i}.qcow2" if machine.format == "qcow2" else f"disk{i}.img")


def delayed_disk(i):
    """The device bb_delay puts the i-th raw disk behind."""
    return f"/dev/mapper/bb-delay{i}"


def cache_option(machine):
    """',cache=none' for delayed disks, the same key for mvmm and QEMU: O_DIRECT, so that every read reaches the
    slow device (the host's page cache would answer repeated ones from RAM); '' for the VMM's default."""
    return ",cache=none" if machine.delay_ms else ""


def qcow2_options(machine):
    """',format=qcow2[,l2-cache-size=X]' for qcow2 disks, the same keys for mvmm and QEMU; '' for raw ones (mvmm
    builds before qcow2, e.g. in a bisect, know no format key)."""
    if machine.format != "qcow2":
        return ""
    return ",format=qcow2" + (f",l2-cache-size={machine.l2_cache_size}" if machine.l2_cache_size else "")


def aio_option(aio):
    """',aio=X' for the --disks disks, the same key for mvmm and QEMU; '' for the VMM's default."""
    return f",aio={aio}" if aio else ""


def mvmm_args(guest, machine, disk_dir=DISK_DIR, aio=None):
    memory = f"size={machine.memory}" + (f",hugepages={machine.hugepages}" if machine.hugepages else "") + \
             (",prealloc=on" if machine.prealloc else "")
    words = ["--kernel", guest.kernel] + (["--initrd", guest.initrd] if guest.initrd else [])
    words += ["--memory", memory, "--cpus", str(machine.cpus), "--cmdline", guest.cmdline, "--log-level", "debug"]
    bus = ("" if machine.bus == "rootport" else f",bus={machine.bus}") + \
        (f",queues={machine.queues}" if machine.queues else "")
    lun = ""
    if machine.kind == "scsi":
        words += ["--scsi-controller", f"id=c0{bus}", "--empty-root-ports", str(scsi_empty_ports(machine.bus))]
        bus, lun = "", ",controller=c0"
    words += [w for i in range(machine.disks)
              for w in ("--disk", f"path={disk_path(machine, i, disk_dir)}{qcow2_options(machine)}"
                                  f"{cache_option(machine)}{aio_option(aio)}{bus}{lun}")]
    words += [w for image in guest.images for w in ("--disk", f"path={image},readonly=on{lun}")]
    return words


def scsi_empty_ports(bus):
    return SCSI_ROOT_PORTS - (1 if bus == "rootport" else 0)


def qemu_slot(i, count):
    """q35 address of the i-th of `count` devices on bus 0: one per slot, 8 functions per slot beyond 29."""
    if count <= len(QEMU_SINGLE_SLOTS):
        return f"{QEMU_SINGLE_SLOTS[i]:#x}.0"
    slot, function = QEMU_SINGLE_SLOTS[i // 8], i % 8
    return f"{slot:#x}.{function}" + (",multifunction=on" if function == 0 else "")


def qemu_disk_options(drives, bus="rootport", queues=None):
    """QEMU options for drives = [(drive options: file, format, ...)]: each a virtio-blk-pci behind its own
    pcie-root-port, or on bus 0 (bus="root"), with `queues` request queues (None: QEMU's default, one per vCPU)."""
    words = []
    for i, drive in enumerate(drives):
        addr = qemu_slot(i, len(drives))
        if bus == "rootport":
            words += ["-device", f"pcie-root-port,id=rp{i},chassis={i + 1},bus=pcie.0,addr={addr}"]
            device = f"virtio-blk-pci,drive=d{i},bus=rp{i}"
        else:
            device = f"virtio-blk-pci,drive=d{i},bus=pcie.0,addr={addr}"
        device += f",num-queues={queues}" if queues else ""
        words += ["-drive", f"{drive},if=none,id=d{i}", "-device", device]
    return words


def qemu_scsi_options(drives, bus="rootport"):
    """QEMU options for the same layout as mvmm's with kind "scsi": pcie-root-ports, a virtio-scsi-pci behind the
    first (or on bus 0 after them), drives = [(drive options: file, format, ...)] as scsi-hd LUNs 0.. of target 0."""
    ports = SCSI_ROOT_PORTS
    words = [w for i in range(ports) for w in
             ("-device", f"pcie-root-port,id=rp{i},chassis={i + 1},bus=pcie.0,addr={qemu_slot(i, ports)}")]
    after_ports = QEMU_SINGLE_SLOTS[(ports + 7) // 8]
    words += ["-device", "virtio-scsi-pci,id=scsi0," + ("bus=rp0" if bus == "rootport" else
                                                         f"bus=pcie.0,addr={after_ports:#x}.0")]
    for i, drive in enumerate(drives):
        words += ["-drive", f"{drive},if=none,id=d{i}",
                  "-device", f"scsi-hd,drive=d{i},bus=scsi0.0,channel=0,scsi-id=0,lun={i}"]
    return words


def qemu_memory_options(machine):
    size = ["-m", machine.memory]
    if not machine.hugepages and not machine.prealloc:
        return size
    backend = "memory-backend-ram"
    extra = ""
    if machine.hugepages:
        backend, extra = "memory-backend-memfd", f",hugetlb=on,hugetlbsize={machine.hugepages}"
    extra += ",prealloc=on" if machine.prealloc else ""
    return size + ["-object", f"{backend},id=ram0,size={machine.memory}{extra}", "-machine", "memory-backend=ram0"]


def qemu_args(guest, machine, firmware="seabios", disk_dir=DISK_DIR, aio=None):
    words = QEMU_FIRMWARE[firmware] + qemu_memory_options(machine)
    words += ["-smp", str(machine.cpus), "-nic", "none", "-kernel", guest.kernel]
    words += (["-initrd", guest.initrd] if guest.initrd else []) + ["-append", guest.cmdline]
    drives = [f"file={disk_path(machine, i, disk_dir)}" + (qcow2_options(machine) or ",format=raw") +
              cache_option(machine) + aio_option(aio) for i in range(machine.disks)]
    drives += [f"file={image},format=raw,readonly=on" for image in guest.images]
    if machine.kind == "scsi":
        return words + qemu_scsi_options(drives, machine.bus)
    return words + qemu_disk_options(drives, machine.bus, machine.queues)


@dataclass(frozen=True)
class Variant:
    """Who boots a configuration: an mvmm build (with a trim policy) or QEMU."""
    name: str  # "mvmm", "mvmm-b", "mvmm-a-batch", "mvmm-calloc-off", "qemu": also in file names in the test host
    vmm: str  # "mvmm" or "qemu"
    build: str = None  # "a" or "b" with two mvmm builds, None with one
    policy: str = None  # --trim-policy, None: mvmm's default
    alloc: str = None  # --request-alloc, None: mvmm's default
    cache_alloc: str = None  # --cache-alloc (qcow2 caches: "mapping" or "heap"), None: mvmm's default
    aio: str = None  # aio= of the --disks disks (mvmm: io_uring, threads, sync; QEMU: io_uring), None: the VMM's

    def function(self):
        """The runner's shell function that starts this variant's binary."""
        return "mvmm_b" if self.build == "b" else self.vmm
