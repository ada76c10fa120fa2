"""mvmm's Python tools, one package: the guest images (images/), the test host VM (testhost/), the benchmarks and
their statistics (bench/), and what they share (say, process).

The entry scripts sit above it in tools/ (mvmm-hostvm, boot-bench, boot-soak, request-bench): Python puts a script's
own folder on sys.path, so they import it as they are. guest-images/build and meson's tests put tools/ on
PYTHONPATH."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
