"""mvmmtools.images.archive: what bsdtar writes from the manifest is the newc archive the kernel unpacks, entry for
entry: names, types, modes, owner, times, link counts, device numbers and contents."""

import stat
import tempfile
import unittest
from pathlib import Path

from mvmmtools.images import BuildError
from mvmmtools.images.archive import Archive

FIELDS = ("ino", "mode", "uid", "gid", "nlink", "mtime", "size", "devmajor", "devminor", "rdevmajor", "rdevminor",
          "namesize", "check")


def entries(data):
    """{name: (header fields, contents)} of a newc archive, as the kernel's initramfs unpacker reads it."""
    found, at = {}, 0
    while True:
        magic, header = data[at:at + 6], data[at + 6:at + 110]
        if magic != b"070701":
            raise ValueError(f"no newc header at {at}: {magic!r}")
        fields = dict(zip(FIELDS, (int(header[i:i + 8], 16) for i in range(0, 104, 8))))
        name = data[at + 110:at + 110 + fields["namesize"] - 1].decode()
        at += 110 + fields["namesize"]
        at += -at % 4
        body = data[at:at + fields["size"]]
        at += fields["size"] + -fields["size"] % 4
        if name == "TRAILER!!!":
            return found
        found[name] = (fields, body)


class ArchiveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.src = Path(self.tmp.name) / "tool"
        self.src.write_bytes(b"#!/bin/sh\n")
        self.src.chmod(0o750)

    def tearDown(self):
        self.tmp.cleanup()

    def test_every_kind_of_entry(self):
        archive = Archive()
        archive.copy("/bin/busybox", self.src, 0o755)
        archive.symlink("/bin/sh", "/bin/busybox")
        archive.chardev("/dev/console", 5, 1)
        archive.file("/lib/modules/load-order", b"virtio.ko\n")
        archive.copy("/init", self.src)
        archive.file("/odd name#1\\", b"x")
        got = entries(archive.write())
        self.assertEqual(list(got), ["bin", "bin/busybox", "bin/sh", "dev", "dev/console", "lib", "lib/modules",
                                     "lib/modules/load-order", "init", "odd name#1\\"])
        for name, (fields, _) in got.items():
            self.assertEqual((fields["uid"], fields["gid"], fields["mtime"]), (0, 0, 0), name)
            self.assertEqual(fields["nlink"], 2 if stat.S_ISDIR(fields["mode"]) else 1, name)
        mode = lambda name: got[name][0]["mode"]
        self.assertEqual(mode("bin"), stat.S_IFDIR | 0o755)
        self.assertEqual(mode("bin/busybox"), stat.S_IFREG | 0o755)
        self.assertEqual(mode("init"), stat.S_IFREG | 0o750)  # the source's permission bits
        self.assertEqual(mode("bin/sh"), stat.S_IFLNK | 0o777)
        self.assertEqual(got["bin/sh"][1], b"/bin/busybox")
        self.assertEqual(mode("dev/console"), stat.S_IFCHR | 0o600)
        self.assertEqual((got["dev/console"][0]["rdevmajor"], got["dev/console"][0]["rdevminor"]), (5, 1))
        self.assertEqual(got["lib/modules/load-order"][1], b"virtio.ko\n")
        self.assertEqual(got["bin/busybox"][1], b"#!/bin/sh\n")
        self.assertEqual(got["odd name#1\\"][1], b"x")

    def test_a_path_goes_in_once(self):
        archive = Archive()
        archive.file("/a/b", b"")
        self.assertTrue(archive.has("/a") and archive.has("/a/b"))
        with self.assertRaises(BuildError):
            archive.file("/a/b", b"")
        self.assertEqual(list(entries(archive.write())), ["a", "a/b"])

    def test_written_after_what_a_file_holds(self):
        archive = Archive()
        archive.file("/scenario", b"echo hi\n")
        with open(Path(self.tmp.name) / "initrd", "wb") as out:
            out.write(b"BASE")
            archive.write(out)
        data = (Path(self.tmp.name) / "initrd").read_bytes()
        self.assertEqual(data[:4], b"BASE")
        self.assertEqual(entries(data[4:])["scenario"][1], b"echo hi\n")


if __name__ == "__main__":
    unittest.main()
