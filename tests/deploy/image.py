"""The image (deploy/images/Containerfile) without a container runtime: its Python environment
built the way the Containerfile builds it (the same pip command on the hashed lock, in a fresh
venv), its /app copied as the COPY lines copy it, its ENV, its user, and its health check."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.manifests import ROOT

IMAGES = ROOT / "deploy" / "images"
LOCK = IMAGES / "requirements.lock"
# The Containerfile's USER.
IMAGE_UID = 10001


@dataclass(frozen=True)
class Recipe:
    pip_args: list[str]  # after `pip install`
    copies: list[tuple[str, str]]  # (source in the repository, path in the image)


def recipe() -> Recipe:
    text = (IMAGES / "Containerfile").read_text().replace("\\\n", " ")
    (install,) = re.findall(r"/opt/chat/bin/pip install ([^\n&]+)", text)
    pip_args = [a.replace("/tmp/requirements.lock", str(LOCK)) for a in shlex.split(install)]
    copies = [tuple(line.split()[1:3]) for line in text.splitlines()
              if line.startswith("COPY ") and "--from" not in line
              and "requirements.lock" not in line]  # fmt: skip
    return Recipe(pip_args, copies)  # type: ignore[arg-type]


def _others_can_run(path: Path) -> bool:
    """Whether a user other than its owner can execute path (every folder above it open)."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def base_python() -> Path:
    """The interpreter the venv is made from (the image's is python:3.11's): this one, unless
    the image's user could not run it (pyenv's under /root, when the tests run as root), then
    the system's of the same version."""
    this = Path(sys.executable).resolve()
    if os.geteuid() != 0 or _others_can_run(this):
        return this
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    return system if system.exists() and _others_can_run(system) else this


def build_env() -> Path:
    """The image's /opt/chat, built once per lock (kept under build/, which git ignores)."""
    steps = recipe()
    python = base_python()
    seed = LOCK.read_bytes() + " ".join([str(python), *steps.pip_args]).encode()
    venv = ROOT / "build" / "image-env" / hashlib.sha256(seed).hexdigest()[:16]
    if not (venv / ".built").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([str(python), "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", *steps.pip_args],
                       check=True, timeout=900)  # fmt: skip
        (venv / ".built").touch()
    return venv


def copy_app(root: Path) -> Path:
    """The image's /app under root: what the Containerfile copies, where it copies it."""
    for source, target in recipe().copies:
        where = root / target.lstrip("/")
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, where, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            where.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, where)
    return root / "app"


def make_read_only(tree: Path) -> None:
    """What a read-only root filesystem gives the container: nothing under tree is writable."""
    for folder, _, files in os.walk(tree):
        for file in files:
            os.chmod(os.path.join(folder, file), 0o444)
        os.chmod(folder, 0o555)


def make_writable(tree: Path) -> None:
    for folder, _, _ in os.walk(tree):
        os.chmod(folder, 0o755)


def environment(venv: Path, app: Path, home: Path) -> dict[str, str]:
    """The Containerfile's ENV, and nothing of this machine's Python setup."""
    return {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": f"{app}:{app / 'gen'}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "HOME": str(home),
    }


def as_image_user() -> list[str]:
    """The prefix that runs a command as the image's USER: when the tests run as root (who
    writes anywhere), through setpriv; otherwise the tests' own user, which is not root either.
    Root it stays only when no interpreter is open to other users (base_python)."""
    if os.geteuid() != 0 or not _others_can_run(base_python()):
        return []
    ids = f"--reuid={IMAGE_UID}", f"--regid={IMAGE_UID}", "--clear-groups"
    return ["setpriv", *ids, "--"]


async def healthcheck(venv: Path, app: Path, env: dict[str, str], target: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        *as_image_user(), str(venv / "bin" / "python"), str(app / "healthcheck.py"),
        env={**env, "CHAT_HEALTHCHECK": target}, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, err.decode()
