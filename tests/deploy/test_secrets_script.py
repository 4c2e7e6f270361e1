"""scripts/k8s_secrets.sh run twice changes nothing: the admin token is not rotated and the dev
stores keep their passwords. The script runs as an operator runs it, its Secrets made by the
machine's kubectl (`create secret ... --dry-run=client -o yaml`); only the cluster is stood in
for: a `kubectl` first on PATH that keeps `create -f`'s objects as files in a folder, answers
`get secret` from them, and hands every other call to the real kubectl."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.manifests import ROOT, kubectl

CLUSTER = """#!{python}
import base64, os, pathlib, sys, yaml
args = sys.argv[1:]
store = pathlib.Path({store!r})
if "--dry-run=client" in args:
    os.execv({kubectl!r}, [{kubectl!r}, *args])
def flag(name):
    return args[args.index(name) + 1]
if args[:2] == ["get", "secret"]:
    path = store / flag("--namespace") / args[2]
    if not path.exists():
        if "--ignore-not-found" in args:
            sys.exit(0)
        sys.exit(f"Error from server (NotFound): secrets {{args[2]!r}} not found")
    output = flag("-o")
    if output == "name":
        print(f"secret/{{args[2]}}")
    else:
        key = output.removeprefix("jsonpath={{.data.").removesuffix("}}")
        print(yaml.safe_load(path.read_text())["data"][key], end="")
elif args[:2] == ["create", "-f"]:
    for obj in (o for o in yaml.safe_load_all(open(args[2])) if o):
        meta = obj["metadata"]
        path = store / meta["namespace"] / meta["name"]
        if path.exists():
            sys.exit(f"Error from server (AlreadyExists): secrets {{meta['name']!r}}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(obj))
        print(f"secret/{{meta['name']}} created")
else:
    sys.exit(f"not stood in for: {{args}}")
"""


def stand_in(tmp_path: Path) -> dict[str, str]:
    """The environment whose kubectl is the stand-in cluster, kept under tmp_path/cluster."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(CLUSTER.format(python=sys.executable, store=str(tmp_path / "cluster"),
                                     kubectl=kubectl()))  # fmt: skip
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "KUBECONFIG": os.devnull}


def run(env: dict[str, str]) -> str:
    done = subprocess.run([str(ROOT / "scripts" / "k8s_secrets.sh"), "--dev", "chat-dev"],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


def stored(tmp_path: Path) -> dict[str, dict[str, str]]:
    """Each Secret's decoded data, by name."""
    return {
        path.name: {k: base64.b64decode(v).decode()
                    for k, v in yaml.safe_load(path.read_text())["data"].items()}
        for path in sorted((tmp_path / "cluster" / "chat-dev").iterdir())
    }  # fmt: skip


def test_running_it_again_changes_nothing_that_exists(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    assert run(env) == ""
    first = stored(tmp_path)
    assert sorted(first) == ["chat-admin", "chat-postgres-password", "chat-redis",
                             "chat-redis-password", "chat-store"]  # fmt: skip
    password = first["chat-postgres-password"]["password"]
    assert first["chat-store"]["url"] == f"postgresql://chat:{password}@postgres:5432/chat"
    assert run(env) == "".join(f"kept secret/{name} (exists)\n" for name in
                               ["chat-admin", "chat-store", "chat-redis",
                                "chat-postgres-password", "chat-redis-password"])  # fmt: skip
    assert stored(tmp_path) == first


def test_a_missing_url_is_made_with_the_password_the_store_already_has(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    run(env)
    first = stored(tmp_path)
    (tmp_path / "cluster" / "chat-dev" / "chat-store").unlink()
    (tmp_path / "cluster" / "chat-dev" / "chat-redis").unlink()
    run(env)
    assert stored(tmp_path) == first
