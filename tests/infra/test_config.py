from dataclasses import dataclass, field

import pytest

from infra.config import ConfigError, load_config


@dataclass(frozen=True)
class Inner:
    path: str = ""
    on: bool = False


@dataclass
class Sample:
    listen: str = "127.0.0.1:1"
    workers: int = 2
    ratio: float = 0.5
    debug: bool = False
    peers: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)


def test_defaults_then_file_then_environment(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sample:\n  workers: 5\n  peers: [a, b]\n")
    config = load_config(
        Sample, "sample", path, env={"CHAT_SAMPLE_RATIO": "0.25", "CHAT_SAMPLE_DEBUG": "true"}
    )
    assert config == Sample(workers=5, ratio=0.25, debug=True, peers=["a", "b"])


def test_environment_lists_are_comma_separated() -> None:
    config = load_config(Sample, "sample", env={"CHAT_SAMPLE_PEERS": "x:1,y:2"})
    assert config.peers == ["x:1", "y:2"]


def test_unknown_fields_and_bad_values_are_clear_errors(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sample:\n  wrokers: 5\n")
    with pytest.raises(ConfigError, match="unknown sample config fields: wrokers"):
        load_config(Sample, "sample", path, env={})
    with pytest.raises(ConfigError, match="'workers'"):
        load_config(Sample, "sample", env={"CHAT_SAMPLE_WORKERS": "many"})


def test_a_dataclass_field_is_a_nested_section(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("sample:\n  inner:\n    path: /a\n")
    assert load_config(Sample, "sample", path, env={}).inner == Inner(path="/a")
    by_env = load_config(Sample, "sample", path, env={"CHAT_SAMPLE_INNER_ON": "true"})
    assert by_env.inner == Inner(path="/a", on=True)
    assert load_config(Sample, "sample", env={}).inner == Inner()
    path.write_text("sample:\n  inner:\n    pth: /a\n")
    with pytest.raises(ConfigError, match=r"unknown sample\.inner config fields: pth"):
        load_config(Sample, "sample", path, env={})
