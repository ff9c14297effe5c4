# SPDX-License-Identifier: MIT
"""cmake --install --prefix TMP puts the package under TMP/<COLLC_PYTHON_DIR>, and there,
with neither PYTHONPATH tricks beyond that dir nor COLLC_LIB, it loads TMP's libcollc.

    test_install.py CMAKE BUILD_DIR PYTHON_DIR
"""

import os
import subprocess
import sys
import tempfile


def main():
    cmake, build, pydir = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="collc-pyinst-") as tmp:
        r = subprocess.run([cmake, "--install", build, "--prefix", tmp], capture_output=True,
                           text=True, timeout=120)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-2000:])
            return "FAIL: cmake --install"
        site = os.path.join(tmp, pydir)
        env = {k: v for k, v in os.environ.items() if k not in ("COLLC_LIB", "PYTHONPATH")}
        env.update(PYTHONPATH=site, PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run([sys.executable, "-c", "import collc; print(collc.__file__); "
                            "print(collc.library_path)"], env=env, cwd=tmp,
                           capture_output=True, text=True, timeout=60)
        print(r.stdout, r.stderr, end="")
        lines = r.stdout.split()
        if r.returncode != 0 or len(lines) != 2:
            return "FAIL: importing the installed package"
        if not lines[0].startswith(site + os.sep) or not lines[1].startswith(tmp + os.sep):
            return f"FAIL: the package or the library is not the installed one (under {tmp})"
    print("installed package loads the installed libcollc")
    return 0


if __name__ == "__main__":
    sys.exit(main())
