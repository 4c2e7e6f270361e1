"""The simulator compiled with mypyc (fleet/compiled.py): it builds, it is what a process with the
build on its path imports, and it records the very same simulation as the plain modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet import compiled
from fleet.region_figures import fingerprints
from fleet.region_scenarios import run_regions_scenario
from fleet.scenarios import run_scenario

# Every scenario, each variant, just past its warm-up (and its event: a kill, a flush at 100 s).
RUNS = (("memory-matters", 75.0), ("gpus-run-out", 75.0), ("replica-dies", 105.0),
        ("cache-lost", 105.0))  # fmt: skip
SCALE = 0.05
# The regions: one lost past the warm-up (at 60 s), at a smaller scale (five regions).
REGIONS_RUN = ("region-lost", 0.01, 90.0)

FINGERPRINTS = textwrap.dedent(
    """
    import json, sys
    from fleet import compiled, region, regions, replicas
    from domain import pool_index, replica_sim
    from fleet.region_scenarios import run_regions_scenario
    from fleet.scenarios import run_scenario
    from fleet.region_figures import fingerprints
    runs = json.loads(sys.argv[1])
    name, scale, duration = json.loads(sys.argv[3])
    print(json.dumps({
        "compiled": [compiled.is_compiled(m)
                     for m in (region, regions, replicas, pool_index, replica_sim)],
        "fingerprints": {
            name: {label: r.fingerprint() for label, r in
                   run_scenario(name, scale=float(sys.argv[2]), seed=3,
                                duration_s=duration).recorders.items()}
            for name, duration in runs
        },
        "regions": fingerprints(run_regions_scenario(name, scale, 3, duration).recorders),
    }))
    """
)


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[compiled.Build]:
    yield compiled.build(out=tmp_path_factory.mktemp("compiled") / "sim-mypyc")


def run_with(path: Path | None, *args: str) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    done = subprocess.run(
        [sys.executable, "-c", FINGERPRINTS, *args],
        env=env,
        cwd=path or compiled.REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_the_compiled_simulator_records_the_same_simulation(build: compiled.Build) -> None:
    assert build.built and build.seconds > 0
    assert (build.path / "fleet" / "region.py").is_file(), "the packages are copied whole"
    assert list((build.path / "domain").glob("replica_sim.*.so")), "compiled in place"
    fast = run_with(build.path, json.dumps(RUNS), str(SCALE), json.dumps(REGIONS_RUN))
    assert fast["compiled"] == [True, True, True, True, True]
    expected = {
        name: {
            label: recorder.fingerprint()
            for label, recorder in run_scenario(
                name, scale=SCALE, seed=3, duration_s=duration
            ).recorders.items()
        }
        for name, duration in RUNS
    }
    assert fast["fingerprints"] == expected
    assert len(expected["memory-matters"]) == 4 and len(expected["gpus-run-out"]) == 4
    name, scale, duration = REGIONS_RUN
    regions = run_regions_scenario(name, scale, 3, duration).recorders
    assert fast["regions"] == fingerprints(regions) and len(regions) == 5


@pytest.mark.slow
def test_an_up_to_date_build_is_reused_and_a_failed_rebuild_keeps_the_last(
    build: compiled.Build, tmp_path: Path
) -> None:
    again = compiled.build(out=build.path)
    assert not again.built and again.seconds == 0.0 and again.path == build.path
    stamp = (build.path / compiled.STAMP).read_text()
    broken = copy_packages(tmp_path / "repo")
    limiter = broken / "domain" / "limiter.py"
    limiter.write_text(limiter.read_text() + "\nNOT_A_NUMBER: int = 'seven'\n")
    with pytest.raises(compiled.BuildError):
        compiled.build(root=broken, out=build.path)  # other sources: rebuilt, and that fails
    assert (build.path / compiled.STAMP).read_text() == stamp, "the last build is kept"
    assert list((build.path / "fleet").glob("region.*.so"))
    with pytest.raises(compiled.BuildError, match="no domain, fleet package"):
        compiled.build(root=tmp_path / "empty", out=build.path)


def copy_packages(to: Path) -> Path:
    compiled.copy_packages(compiled.REPO, to)
    return to


def test_the_digest_follows_every_source_file_and_nothing_else(tmp_path: Path) -> None:
    root = copy_packages(tmp_path / "repo")
    first = compiled.source_digest(root)
    assert compiled.source_digest(root) == first
    cache = root / "fleet" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "region.cpython-311.pyc").write_bytes(b"\0")
    assert compiled.source_digest(root) == first, "byte code is not a source"
    data = root / "domain" / "data"
    (data / "new.json").write_text("{}")
    assert compiled.source_digest(root) != first, "package data is copied, so it counts"
    (data / "new.json").unlink()
    region = root / "fleet" / "region.py"
    region.write_text(region.read_text() + "\n")
    assert compiled.source_digest(root) != first


def test_a_type_error_fails_the_build_with_mypys_message(tmp_path: Path) -> None:
    root = copy_packages(tmp_path / "repo")
    limiter = root / "domain" / "limiter.py"
    limiter.write_text(limiter.read_text() + "\nNOT_A_NUMBER: int = 'seven'\n")
    out = tmp_path / "out"
    with pytest.raises(compiled.BuildError) as failed:
        compiled.build(root=root, out=out)
    assert "domain/limiter.py" in str(failed.value)
    assert "incompatible types in assignment" in str(failed.value).lower()
    assert not out.exists(), "nothing is left half-built"
    assert not list(tmp_path.glob("out.tmp-*")), "the staging directory is removed"
