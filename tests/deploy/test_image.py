"""The image (deploy/images/Containerfile) without a container runtime: its Python environment
is built the way the Containerfile builds it (the same pip command on the hashed lock, in a
fresh venv, and the same source copied) and the whole platform is started from it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from tests.deploy.manifests import ROOT

pytestmark = pytest.mark.slow
IMAGES = ROOT / "deploy" / "images"
LOCK = IMAGES / "requirements.lock"
STARTUP_TIMEOUT_S = 180


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


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = dict(d.split("==") for d in project["dependencies"])
    entries = re.findall(r"^([a-z0-9._-]+)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}.*\n)+)",
                         LOCK.read_text(), flags=re.M)  # fmt: skip
    locked = {name: version for name, version, _ in entries}
    assert {name: locked.get(name) for name in wanted} == wanted
    assert len(entries) == LOCK.read_text().count("==")  # every pin has its hashes
    assert recipe().pip_args[:3] == ["--require-hashes", "--no-deps", "--only-binary=:all:"]


@pytest.fixture(scope="module")
def image_env() -> Path:
    """The image's /opt/chat, built once per lock (kept under build/, which git ignores)."""
    steps = recipe()
    key = hashlib.sha256(LOCK.read_bytes() + " ".join(steps.pip_args).encode()).hexdigest()[:16]
    venv = ROOT / "build" / "image-env" / key
    if not (venv / ".built").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet",
                        "--disable-pip-version-check", *steps.pip_args],
                       check=True, timeout=900)  # fmt: skip
        (venv / ".built").touch()
    return venv


def image_root(tmp_path: Path) -> Path:
    """The image's /app: what the Containerfile copies, where it copies it."""
    root = tmp_path / "image"
    for source, target in recipe().copies:
        where = root / target.lstrip("/")
        if (ROOT / source).is_dir():
            shutil.copytree(ROOT / source, where, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            where.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, where)
    return root / "app"


def image_environment(venv: Path, app: Path, tmp_path: Path) -> dict[str, str]:
    """The Containerfile's ENV, and nothing of this machine's Python setup."""
    return {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "PYTHONPATH": f"{app}:{app / 'gen'}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "HOME": str(tmp_path),
    }


async def healthcheck(venv: Path, app: Path, env: dict[str, str], target: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        str(venv / "bin" / "python"), str(app / "healthcheck.py"),
        env={**env, "CHAT_HEALTHCHECK": target}, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode is not None
    return process.returncode, err.decode()


async def first_answer(edge: str, token: str) -> list[str]:
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "m1"}
    async with aiohttp.ClientSession() as http, http.post(
        f"{edge}/v1/conversations/c1/messages", json={"content": "Name a colour."},
        headers=headers, timeout=aiohttp.ClientTimeout(total=120),
    ) as response:  # fmt: skip
        assert response.status == 200, await response.text()
        body = await response.text()
    return re.findall(r"^event: (\w+)$", body, flags=re.M)


async def test_the_platform_runs_from_the_images_environment(
    image_env: Path, tmp_path: Path
) -> None:
    app = image_root(tmp_path)
    env = image_environment(image_env, app, tmp_path)
    python = str(image_env / "bin" / "python")
    probe = await asyncio.create_subprocess_exec(
        python, "-c", "import grpc, gateway; print(grpc.__file__); print(gateway.__file__)",
        env=env, cwd=app, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    where = (await asyncio.wait_for(probe.communicate(), 60))[0].decode().split()
    assert where[0].startswith(str(image_env)) and where[1].startswith(str(app))
    state = tmp_path / "state"
    up = await asyncio.create_subprocess_exec(
        python, "-m", "clients.chatctl.main", "up", "--json", "--listen", "127.0.0.1:0",
        "--state-dir", str(state), cwd=app, stdout=asyncio.subprocess.PIPE,
        env={**env, "CHAT_NODEAGENT_ENGINE": "sim", "CHAT_NODEAGENT_SIM_SPEED": "20"},
    )  # fmt: skip
    try:
        assert up.stdout is not None
        line = await asyncio.wait_for(up.stdout.readline(), STARTUP_TIMEOUT_S)
        summary = json.loads(line)
        events = await first_answer(summary["edge"], summary["tokens"]["plus"])
        assert events[0] == "meta" and events[-1] == "done" and "delta" in events
        ports = {name: json.loads((state / f"{name}.ready.json").read_text())["health"]
                 for name in ("scheduler", "gateway", "nodeagent-0")}  # fmt: skip
        for port in ports.values():
            assert await healthcheck(image_env, app, env, f"grpc://127.0.0.1:{port}") == (0, "")
        assert await healthcheck(image_env, app, env, f"{summary['edge']}/healthz") == (0, "")
    finally:
        up.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(up.wait(), 60)
    assert code == 0
    code, err = await healthcheck(image_env, app, env, f"grpc://127.0.0.1:{ports['gateway']}")
    assert code == 1 and err == f"unhealthy: 127.0.0.1:{ports['gateway']}: UNAVAILABLE\n"


def test_the_image_runs_as_the_user_and_the_modules_the_manifests_name() -> None:
    from tests.deploy.manifests import pod_containers, render, workloads

    text = (IMAGES / "Containerfile").read_text()
    assert re.findall(r"^USER (\S+)$", text, flags=re.M) == ["10001:10001"]
    assert "HEALTHCHECK" in text
    copied = {target for _, target in recipe().copies}
    for workload in workloads(render("prod")):
        pod = workload["spec"]["template"]["spec"]
        for c in pod_containers(workload):
            if c["image"].split("/")[-1].startswith("chat-platform"):
                assert pod["securityContext"]["runAsUser"] == 10001
                module = c["command"][2].split(".")[0]
                assert f"/app/{module}" in copied, module
