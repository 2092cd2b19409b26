"""Interpreters for `shoal serve` as root, whose workers' `python` is the service's own:
one an unprivileged worker user can run, and one closed to it, as a virtualenv under
/root is. Each is a virtualenv without pip whose `.pth` adds this environment's
site-packages (so it runs this checkout and its dependencies), made from a base
interpreter of the same major.minor version."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534  # "other" to every file, as a worker user made by `useradd --system` is
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def checkout_python(where: Path, base: str) -> Path:
    """A virtualenv at `where`, from the interpreter `base`, that runs this checkout."""
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    site = where / "lib" / f"python{VERSION}" / "site-packages"
    mine = sysconfig.get_path("purelib")
    # addsitedir, not a bare path: the editable install's own .pth must run too.
    (site / "shoal-checkout.pth").write_text(f"import site; site.addsitedir({mine!r})\n")
    return where / "bin" / "python"


def _as_nobody(python: str | Path, code: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            [str(python), "-c", code],
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            env={"PATH": "/usr/bin:/bin", "HOME": "/"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except OSError:
        return None


def open_python(where: Path) -> tuple[Path | None, str]:
    """An interpreter at `where` (whose directories others may enter) that an unprivileged
    user can run with Shoal's code, or None and why there is none."""
    bases = [os.path.realpath(getattr(sys, "_base_executable", sys.executable))]
    bases += [f"{d}/python{VERSION}" for d in ("/usr/local/bin", "/usr/bin")]
    same = f"import sys; sys.exit(sys.version_info[:2] != {sys.version_info[:2]!r})"
    for base in dict.fromkeys(bases):
        if not os.path.exists(base):
            continue
        got = _as_nobody(base, same)
        if got is None or got.returncode != 0:
            continue
        shutil.rmtree(where, ignore_errors=True)
        python = checkout_python(where, base)
        got = _as_nobody(python, "import scheduler.worker.launcher")
        if got is not None and got.returncode == 0:
            return python, ""
    return None, (
        f"no Python {VERSION} that an unprivileged user can run with this checkout "
        f"(tried {', '.join(dict.fromkeys(bases))})"
    )
