#!/usr/bin/env python3
"""What `meson setup` gives a user who passes no options: warnings on (-Wall -Wextra) and never -Werror, so that
another compiler's new warning cannot fail their build.  (tools/build, the development and CI build, turns
-Werror on.)"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main():
    with tempfile.TemporaryDirectory(prefix="mvmm-setup-") as tmp:
        subprocess.run(["meson", "setup", f"{tmp}/build", str(REPO)], check=True, capture_output=True)
        out = subprocess.run(["meson", "introspect", f"{tmp}/build", "--buildoptions"], check=True,
                             capture_output=True, text=True).stdout
    options = {o["name"]: o["value"] for o in json.loads(out)}
    failures = []
    if options["werror"]:
        failures.append("a plain `meson setup` turns warnings into errors (werror=true)")
    if str(options["warning_level"]) != "2":
        failures.append(f"warning_level is {options['warning_level']}, not 2 (-Wall -Wextra)")
    for f in failures:
        print("FAIL:", f)
    print("meson setup defaults: werror", options["werror"], "warning_level", options["warning_level"])
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
