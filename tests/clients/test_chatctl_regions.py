"""How `chatctl up --regions` composes each region: with several schedulers, membership, the
ladder and the rollout in the directory's etcd under the region's own prefix; with Redis, the
region's own key prefix there."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from clients.chatctl.main import build_parser, check_up
from clients.chatctl.regions import region_settings

ETCD = "127.0.0.1:2379"


def _up(*flags: str) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(["up", "--regions", "a,b", "--listen", "127.0.0.1:8080", *flags])
    check_up(parser, args)
    return args


def test_several_schedulers_a_region_share_the_directorys_etcd_each_under_its_prefix(
    tmp_path: Path,
) -> None:
    args = _up("--schedulers", "2", "--state-dir", str(tmp_path))
    a, b = (region_settings(args, name, i, ETCD, None) for i, name in enumerate(args.regions))
    assert [(s.schedulers, s.etcd_endpoint, s.etcd_prefix) for s in (a, b)] == [
        (2, ETCD, "/chat/v1/regions/a/"),
        (2, ETCD, "/chat/v1/regions/b/"),
    ]
    assert (a.state_dir, a.edge_listen, b.edge_listen) == (
        tmp_path / "regions" / "a",
        "127.0.0.1:8080",
        "127.0.0.1:8081",
    )


def test_one_scheduler_a_region_keeps_membership_in_memory() -> None:
    settings = region_settings(_up(), "a", 0, ETCD, None)
    assert (settings.etcd_endpoint, settings.etcd_prefix, settings.global_etcd_endpoint) == (
        "",
        "",
        ETCD,
    )


def test_gateways_of_each_region_take_their_own_part_of_one_redis() -> None:
    args = _up("--gateways", "2", "--redis", "redis://127.0.0.1:6379/0")
    prefixes = [region_settings(args, name, 0, ETCD, None).redis_prefix for name in args.regions]
    assert prefixes == ["chat:regions:a:", "chat:regions:b:"]


def test_several_schedulers_without_regions_still_need_etcd(capsys) -> None:
    parser = build_parser()
    args = parser.parse_args(["up", "--schedulers", "2"])
    with pytest.raises(SystemExit):
        check_up(parser, args)
    assert "more than one scheduler needs --etcd (or --regions)" in capsys.readouterr().err
