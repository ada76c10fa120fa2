#!/usr/bin/env python3
"""mvmm's virtio-scsi against QEMU's scsi-hd, as a guest's sg3_utils see them: one test host boot runs the same guest
(guest-images/scripts/sg-compare: sg_inq, sg_vpd pages 0/80/83/b0/b1/b2, sg_readcap -l, sg_modes, sg_luns,
sg_opcodes, sg_verify, sg_write_same, sg_unmap, sg_turs, sg_sync, sg_wr_mode on the caching page, sg_reset then the
unit attention, writes to a read-only LUN) under mvmm and under QEMU, on the same layout of fresh images: LUN 0
writable, LUN 1 read-only, LUN 2 with 4096-byte blocks, the same serials and NAA designators, and QEMU named as mvmm
(QEMU_AS_MVMM). Every answer is compared; a difference fails the test unless DIFFERENCES lists it with a reason,
and a listed difference that no longer occurs fails it too (the list stays true). The comparison table is printed
(and written to $SG_COMPARE_TABLE when set). mvmm's answers are also checked on their own (own_checks): DATA
PROTECT for every write to the read-only LUN, WRITE SAME's pattern and UNMAP's and WRITE SAME UNMAP's zeroes read
back by the guest, and the caching page's WCE as the guest set it."""

import hashlib
import os
import re
import tempfile

import guest
from guest import Run, expect, guest_args

MiB = 1 << 20
# Seconds each run may take in the test host (the whole test took 156 s here, 692 s while two builds ran).
RUN_TIMEOUT = 600
LUNS = [  # (lun, size, read-only, logical block size)
    (0, 8 * MiB, False, 512),
    (1, 4 * MiB, True, 512),
    (2, 8 * MiB, False, 4096),
]

# Differences that are not mvmm's to fix: (LUN or None for any, command name regex, reason). A command whose
# answers differ is accepted when one of these matches it; every accepted difference is still printed with its reason.
READ_ONLY_LUN = next(lun for lun, _, read_only, _ in LUNS if read_only)
DIFFERENCES = [
    (None, r"^inquiry$", "SYNC (synchronous transfer on a parallel SCSI bus): QEMU sets it; virtio has no such bus"),
    (None, r"^vpd-0x83$", "the second designator: mvmm's T10 vendor ID (vendor + serial), QEMU's vendor specific "
                          "(serial); both have the same NAA"),
    (None, r"^vpd-0xb0$", "limits of each implementation: QEMU's max_io_size (2 GiB transfers), 255 UNMAP descriptors "
                          "and its WRITE SAME length; mvmm's 32 descriptors, 2^18-block WRITE SAME, and no "
                          "transfer limit but virtio-scsi's max_sectors"),
    (None, r"^modes-all$", "QEMU adds the R/W error recovery page and the obsolete geometry pages 04h/05h (optional "
                           "in SBC); mvmm has the Control page 0Ah (fixed-format sense) that QEMU lacks"),
    (None, r"^luns$", "QEMU 7.2 answers REPORT LUNS only when it is sent to LUN 0 (ILLEGAL REQUEST elsewhere)"),
    (None, r"^opcodes", "QEMU 7.2 has no REPORT SUPPORTED OPERATION CODES (ILLEGAL REQUEST)"),
    (None, r"^requests$", "QEMU keeps the last CHECK CONDITION's sense for REQUEST SENSE though autosense delivered "
                          "it; mvmm answers NO SENSE (SPC-4 5.12: sense data is cleared once delivered)"),
    (None, r"^verify-(bytchk|miscompare)$", "QEMU 7.2's VERIFY refuses BYTCHK=1 (ILLEGAL REQUEST); mvmm compares "
                                            "(a match is GOOD, a mismatch MISCOMPARE)"),
    (READ_ONLY_LUN, r"^(readcap|vpd-0xb0|vpd-0xb2|unmap-no-list)$",
     "a read-only LUN: mvmm reports no provisioning (LBPME 0, no UNMAP limits, LBPU/LBPWS 0) and refuses UNMAP "
     "even without a list as write-protected; QEMU advertises UNMAP, then answers DATA PROTECT"),
]

# What QEMU's scsi-hd is told so that it names itself as mvmm does (INQUIRY, and the identity line sg3_utils print
# before many answers) and says what mvmm says of its medium: FUA honoured (DPOFUA), not rotating (VPD B1h).
QEMU_AS_MVMM = "vendor=MVMM,product=VIRTUAL DISK,ver=0001,dpofua=on,rotation_rate=1"


def serial(lun):
    return f"sgc-lun{lun}"


def naa(serial_text):
    """mvmm's NAA designator for a serial (devices/virtio/scsi/responses.cc), given to QEMU as wwn= so that
    both answer VPD 83h with the same NAA."""
    h = 0xcbf29ce484222325
    for c in serial_text.encode():
        h = ((h ^ c) * 0x100000001b3) & 0xffffffffffffffff
    return 0x3 << 60 | (h & 0x0fffffffffffffff)


def runs(scratch):
    cmdline = "mvmm.script=sg-compare"
    mvmm_images = {lun: f"{scratch}/mvmm-lun{lun}.img" for lun, *_ in LUNS}
    qemu_images = {lun: f"{scratch}/qemu-lun{lun}.img" for lun, *_ in LUNS}
    mvmm_args = ["--scsi-controller", "id=c0"]
    qemu_args = ["-kernel", guest.guest_image("kernel"), "-initrd", guest.guest_image("guest_initrd"),
                 "-append", f"console=ttyS0 quiet {cmdline}", "-m", "512M", "-smp", "1",
                 "-device", "virtio-scsi-pci,id=scsi0"]
    for lun, size, read_only, block in LUNS:
        mvmm_args += ["--disk", f"path={mvmm_images[lun]},controller=c0,lun={lun},serial={serial(lun)}"
                      + (",readonly=on" if read_only else "") + f",logical-block-size={block}"]
        qemu_args += ["-drive", f"file={qemu_images[lun]},if=none,id=d{lun},format=raw,cache=writeback"
                      + (",readonly=on" if read_only else ",discard=unmap"),
                      "-device", f"scsi-hd,drive=d{lun},bus=scsi0.0,scsi-id=0,lun={lun},serial={serial(lun)},"
                      f"wwn={naa(serial(lun)):#x},logical_block_size={block},physical_block_size={block},"
                      f"min_io_size={block},{QEMU_AS_MVMM}"]
    sizes = {lun: size for lun, size, *_ in LUNS}
    return (Run(guest_args(cmdline, extra=mvmm_args), scratch_images={mvmm_images[l]: sizes[l] for l in sizes},
                run_timeout=RUN_TIMEOUT),
            Run(qemu_args, scratch_images={qemu_images[l]: sizes[l] for l in sizes}, peer_qemu=True,
                run_timeout=RUN_TIMEOUT))


def answers(run):
    """{(lun, name): (exit code, [output lines])} of the guest's SGC lines."""
    found = {}
    for m in re.finditer(r"SGC-BEGIN (\d+) (\S+)\r?\n(.*?)SGC-END \1 \2 rc=(\d+)", run.output, re.S):
        lun, name, body, rc = m.groups()
        lines = [line.split(" | ", 1)[1].rstrip() if " | " in line else ""
                 for line in body.splitlines() if line.startswith(f"SGC {lun} {name}")]
        if name == "luns":
            lines.sort()  # SPC leaves the order of the list open: QEMU lists its LUNs newest first
        found[(int(lun), name)] = (int(rc), lines)
    return found


def write_cache_enabled(lines):
    """WCE of the caching page in a MODE SENSE(10) answer printed as hex bytes (caching_raw in sg-compare)."""
    data = [int(word, 16) for line in lines for word in line.split()]
    page = 8 + (data[6] << 8 | data[7])  # after the 8-byte header and its block descriptors
    return bool(data[page + 2] & 0x04)


def own_checks(found):
    """What mvmm's answers must show whatever QEMU answers: a list of what is wrong."""
    wrong = []
    for lun, _, read_only, block in LUNS:
        def answer(name):
            return found.get((lun, name), (None, []))

        def md5(name):
            rc, lines = answer(name)
            return lines[0].split()[0] if rc == 0 and lines else f"rc={rc}"

        if read_only:
            for name in ("write-same-10", "write-same-16-unmap", "unmap", "dd-write"):
                rc, lines = answer(name)
                if rc in (None, 0) or "data protect" not in " ".join(lines).lower():
                    wrong.append(f"LUN {lun} {name}: no DATA PROTECT (rc={rc})")
            continue
        expected = {"read-back": hashlib.md5(b"Z" * block * 4).hexdigest(),
                    "write-same-unmap-read-back": hashlib.md5(bytes(block * 4)).hexdigest(),
                    "unmap-read-back": hashlib.md5(bytes(block * 8)).hexdigest()}
        for name, digest in expected.items():
            if md5(name) != digest:
                wrong.append(f"LUN {lun} {name}: read back {md5(name)}, not {digest}")
        for name, wce in (("caching-raw-off", False), ("caching-raw-on", True)):
            rc, lines = answer(name)
            if rc != 0 or write_cache_enabled(lines) != wce:
                wrong.append(f"LUN {lun} {name}: WCE is not {int(wce)} (rc={rc}: {lines})")
    return wrong


def reason_for(lun, name):
    return next((why for where, pattern, why in DIFFERENCES if where in (None, lun) and re.search(pattern, name)),
                None)


def table(mvmm, qemu):
    """The comparison: one row per command, with both answers where they differ; the differences no entry of
    DIFFERENCES accepts, and the entries that accepted none."""
    rows, failures, used = [], [], set()
    for key in sorted(set(mvmm) | set(qemu)):
        ours, theirs = mvmm.get(key), qemu.get(key)
        lun, name = key
        if ours == theirs:
            rows.append(f"| {lun} | {name} | same (rc={ours[0]}) | |")
            continue
        why = reason_for(lun, name)
        show = lambda a: "missing" if a is None else f"rc={a[0]}: " + " / ".join(a[1])[:400]
        rows.append(f"| {lun} | {name} | mvmm {show(ours)}<br>QEMU {show(theirs)} | {why or 'NOT ACCEPTED'} |")
        used.add(why)
        if why is None:
            failures.append(key)
    unused = [why for _, _, why in DIFFERENCES if why not in used]
    return ["| LUN | command | answers | accepted because |", "|---|---|---|---|"] + rows, failures, unused


def test_sg3_utils_answers_match_qemu():
    with tempfile.TemporaryDirectory() as scratch:
        mvmm_run, qemu_run = runs(scratch)
        guest.run_all([mvmm_run, qemu_run], timeout=1500)
    mvmm, qemu = answers(mvmm_run), answers(qemu_run)
    expect(mvmm_run.code == 0 and len(mvmm) > 100, f"mvmm exited {mvmm_run.code}, {len(mvmm)} answers", mvmm_run)
    expect(qemu_run.code == 0 and len(qemu) > 100, f"QEMU exited {qemu_run.code}, {len(qemu)} answers", qemu_run)
    lines, failures, unused = table(mvmm, qemu)
    text = "\n".join(lines)
    print(text)
    if os.environ.get("SG_COMPARE_TABLE"):
        with open(os.environ["SG_COMPARE_TABLE"], "w") as f:
            f.write(text + "\n")
    matched = sum(1 for key in mvmm if mvmm.get(key) == qemu.get(key))
    print(f"{matched} of {len(set(mvmm) | set(qemu))} answers the same")
    expect(not failures, f"{len(failures)} answers differ from QEMU's without a reason: {failures}")
    expect(not unused, f"DIFFERENCES lists what no longer differs (remove it): {unused}")
    wrong = own_checks(mvmm)
    expect(not wrong, "mvmm's answers, checked on their own: " + "; ".join(wrong))
    expect(not own_checks(qemu), "QEMU's answers fail the same checks (the checks are wrong?): "
           + "; ".join(own_checks(qemu)))


if __name__ == "__main__":
    guest.main([test_sg3_utils_answers_match_qemu])
