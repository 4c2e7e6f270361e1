"""`chatctl plan`: every input a flag, the table and the JSON, bad input exits 2 (the
calculation's own tests: tests/domain/test_capacity.py)."""

from __future__ import annotations

import argparse
import json
from dataclasses import fields

import pytest

from clients.chatctl.plan import FLAG_HELP, PRESETS, add_plan_parser, run_plan
from domain.capacity import SessionInputs, plan_sessions

# The sizings round their figures; this is how far from a published figure a result may lie.
TOLERANCE = 0.03

SESSIONS = plan_sessions(SessionInputs())
LEVERS = {row.lever: row for row in SESSIONS.levers}


def within(published: float) -> object:
    return pytest.approx(published, rel=TOLERANCE)


def test_every_input_is_a_flag_and_every_flag_an_input() -> None:
    inputs = {item.name for preset in PRESETS.values() for item in fields(preset)}
    assert inputs == set(FLAG_HELP)


# --- the command line ---


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="chatctl")
    add_plan_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["plan", *argv])


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run_plan(parse(*argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_output_of_preset_002(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--preset", "002", "--json")
    assert code == 0
    document = json.loads(out)
    assert set(document) == {"preset", "inputs", "results", "steps"}
    assert document["preset"] == "002"
    assert document["inputs"]["ttl_s"] == 20
    assert document["results"]["fleet"]["gpus"] == within(12_222)
    assert len(document["results"]["levers"]) == 6
    assert set(document["results"]["levers"][0]) == {
        "lever",
        "change",
        "concurrent_per_gpu",
        "gpus",
        "dollars_per_year",
        "saving_per_year",
    }
    for step in document["steps"]:
        assert set(step) == {"name", "formula", "value", "unit"}
        assert "{" not in step["formula"]


def test_json_output_of_preset_000_is_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json")
    document = json.loads(out)
    assert code == 0
    assert document["preset"] == "000"
    assert document["results"]["fleet"]["fleet_large_only"] == within(3000)
    steps = {step["name"]: step for step in document["steps"]}
    assert steps["messages/s, average"]["unit"] == "msg/s"
    assert steps["uncached prompt tokens"]["formula"] == "100 + (1 - 0.9) x 2,900"


def test_table_shows_each_step_with_its_formula(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--preset", "002")
    assert code == 0
    assert "sessions per node, with TTL" in out
    assert "366,667 / 121 per node" in out
    assert "lever table" in out
    assert "fp8 KV cache" in out


def test_flags_override_the_spec(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--preset", "002", "--json", "--daily-users", "20000000")
    doubled = json.loads(out)["results"]["fleet"]["gpus"]
    assert doubled == pytest.approx(2 * SESSIONS.fleet.gpus)
    _, out, _ = run(capsys, "--preset", "002", "--json", "--kv-bytes-per-element", "1")
    assert json.loads(out)["results"]["fleet"]["gpus"] == pytest.approx(LEVERS["fp8 KV cache"].gpus)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--daily-users", "-5"], "--daily-users must be greater than 0"),
        (["--preset", "002", "--daily-users", "0"], "--daily-users must be greater than 0"),
        (["--cached-history-share", "1.5"], "--cached-history-share is a share"),
        (["--small-model-share", "-0.1"], "--small-model-share is a share"),
        (["--spare-share", "2"], "--spare-share is a share"),
        (["--preset", "002", "--small-session-share", "1.1"], "--small-session-share is a share"),
        (["--preset", "002", "--gpu-memory-gb", "0"], "--gpu-memory-gb must be greater than 0"),
        (["--preset", "002", "--weights-gb", "400"], "do not fit in 4 x 80 GB"),
        (["--preset", "002", "--weights-gb", "310"], "no GPU memory for the KV cache"),
        (["--preset", "002", "--prefix-tokens", "600000"], "shared prefix needs"),
        (["--new-message-tokens", "5000"], "cannot exceed --prompt-tokens"),
        (["--ttl-s", "30"], "--ttl-s does not apply to --preset 000"),
        (["--preset", "002", "--spare-share", "0.2"], "does not apply to --preset 002"),
        (["--peak-factor", "nan"], "finite"),
    ],
)
def test_bad_inputs_exit_2_with_a_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert message in err


def test_a_flag_that_is_not_a_number_is_an_argparse_error() -> None:
    with pytest.raises(SystemExit) as exited:
        parse("--daily-users", "many")
    assert exited.value.code == 2


def test_counts_take_integers_and_the_rest_take_any_number() -> None:
    args = parse("--messages-per-user", "7.5", "--daily-users", "1e6", "--replica-gpus", "8")
    assert (args.messages_per_user, args.daily_users, args.replica_gpus) == (7.5, 1e6, 8)
    with pytest.raises(SystemExit):
        parse("--layers", "80.5")


def test_regions_at_ten_times_the_users(capsys: pytest.CaptureFixture[str]) -> None:
    """Sizing 000's step 6: ten times the users need about 15,000 GPUs, five regions of about
    3,000; with one lost, the other four carry the peak on their spare GPUs."""
    code, out, _ = run(capsys, "--daily-users", "100000000", "--json")
    assert code == 0
    regions = json.loads(out)["results"]["regions"]
    assert regions["regions"] == 5
    assert regions["gpus_per_region"] == within(3_000)
    assert regions["busy_share_one_lost"] == pytest.approx(0.769 * 5 / 4, abs=0.005)
    assert regions["regions_to_lose_one"] == 5
    steps = {step["name"]: step for step in json.loads(out)["steps"]}
    assert steps["regions"]["formula"] == "14,686 GPUs / 3,000 GPUs a region, rounded up"


def test_a_smaller_region_cap_means_more_regions(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--daily-users", "100000000", "--region-gpu-cap", "2000", "--json")
    regions = json.loads(out)["results"]["regions"]
    assert (code, regions["regions"], regions["gpus_per_region"]) == (0, 8, 14_686 / 8)
    code, _, err = run(capsys, "--region-gpu-cap", "0")
    assert code == 2
    assert err == "chatctl plan: error: --region-gpu-cap must be greater than 0, not 0.0\n"
