"""mvmmtools.images.modules on the Debian kernel package the images are built from, when it is in the cache
(guest-images/build puts it there; skipped otherwise): modprobe's order, builtins skipped, unknown names refused,
and the module lists' parameters."""

import tempfile
import unittest
from pathlib import Path

from mvmmtools.images import BuildError
from mvmmtools.images.cache import cache_root
from mvmmtools.images.modules import read_module_list, resolve_modules


def cached_kernel():
    """(extracted package root, release) of a cached cloud kernel whose depmod ran, or None."""
    for root in sorted(cache_root().glob("pkgs/linux-image-*-cloud-amd64_*")):
        for mdir in (root / "lib/modules").glob("*"):
            if (mdir / "modules.dep.bin").exists():
                return root, mdir.name
    return None


class ResolveTest(unittest.TestCase):
    def setUp(self):
        found = cached_kernel()
        if found is None:
            self.skipTest(f"no extracted cloud kernel in {cache_root()} (guest-images/build makes one)")
        self.root, self.release = found

    def names(self, *wanted):
        return [name for name, _ in resolve_modules(self.root, self.release, list(wanted))]

    def test_dependencies_come_first_once(self):
        self.assertEqual(self.names("virtio_blk"), ["virtio_ring", "virtio", "virtio_blk"])
        self.assertEqual(self.names("kvm_amd"), ["irqbypass", "kvm", "kvm_amd"])
        both = self.names("virtio_scsi", "sd_mod")
        self.assertEqual(both, ["virtio_ring", "virtio", "scsi_common", "scsi_mod", "virtio_scsi", "sd_mod"])

    def test_paths_are_the_packages_files(self):
        for _, rel in resolve_modules(self.root, self.release, ["kvm_amd"]):
            self.assertTrue((self.root / "lib/modules" / self.release / rel).is_file(), rel)

    def test_builtin_modules_are_skipped(self):
        self.assertEqual(self.names("crc32c_generic", "virtio_ring"), ["virtio_ring"])

    def test_an_unknown_module_is_an_error(self):
        with self.assertRaises(BuildError):
            resolve_modules(self.root, self.release, ["no_such_module"])


class ListTest(unittest.TestCase):
    def test_names_and_options(self):
        with tempfile.NamedTemporaryFile("w", suffix=".modules") as f:
            f.write("# comment\nvirtio-pci virtio_blk  # two\noptions scsi-mod scan=sync x=1\n")
            f.flush()
            self.assertEqual(read_module_list(Path(f.name)),
                             (["virtio_pci", "virtio_blk"], {"scsi_mod": "scan=sync x=1"}))


if __name__ == "__main__":
    unittest.main()
