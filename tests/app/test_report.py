"""``inspect_world`` / ``format_report`` against our Catch server and the official unusual-spec server."""
from __future__ import annotations

import socket

import numpy as np
import pytest
from gymnasium import spaces

from dmrpc_gym.client.connection import Connection
from dmrpc_gym.client.properties import Properties
from dmrpc_gym.app.report import format_report, inspect_world
from dmrpc_gym.server import Server
from dmrpc_gym.protocol.wire import pb
from dmrpc_gym.worlds.catch import Catch

from official_servers import UNUSUAL_SPECS, start_official_server


@pytest.fixture(scope="module")
def catch_server():
    with Server(Catch) as server:
        yield server


@pytest.fixture(scope="module")
def official():
    with start_official_server(UNUSUAL_SPECS) as server:
        yield server


def _section(text: str, title: str) -> list[str]:
    """The rows of the table headed ``title (n)`` (after its header and rule lines)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title + " ("))
    end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
    return lines[start + 3:end]


def _row(text: str, title: str, first_cell: str) -> str:
    (line,) = [line for line in _section(text, title) if line.split()[:1] == [first_cell]]
    return line


def test_catch_report_lists_specs_and_properties(catch_server):
    report = inspect_world(catch_server.address, world_settings={"rows": 6, "columns": 4})
    assert report.created and report.address == catch_server.address
    assert [(r.name, r.dtype, r.shape, r.bounds) for r in report.actions] == [("paddle", "int8", (), "[-1, 1]")]
    assert report.actions[0].space == spaces.Discrete(3, start=-1, dtype=np.int8)
    board = next(r for r in report.observations if r.name == "board")
    assert (board.dtype, board.shape, board.bounds) == ("float32", (6, 4), "[0, 1]")
    assert board.space == spaces.Box(0.0, 1.0, (6, 4), np.float32) and board.reason is None
    assert {"reward", "discount"} <= {r.name for r in report.observations}
    props = {p.key: p for p in report.properties}
    assert props["world_name"].value.item() == report.world_name
    assert props["seed"].readable and props["seed"].writable

    text = format_report(report)
    assert text.splitlines()[0] == (f"World {report.world_name!r} at {catch_server.address} "
                                    "(created for this report, destroyed after)")
    assert "Actions (1)" in text and "Properties (" in text
    paddle = _row(text, "Actions", str(report.actions[0].uid))
    assert paddle.split() == [str(report.actions[0].uid), "paddle", "int8", "()", "[-1,", "1]",
                              "Discrete(3,", "start=-1,", "dtype=int8)"]
    board_line = _row(text, "Observations", str(board.uid))
    assert "(6, 4)" in board_line and "Box(0.0, 1.0, (6, 4), float32)" in board_line
    world_line = _row(text, "Properties", "world_name")
    assert world_line.split()[1:5] == ["string", "()", "r--", repr(report.world_name)]


def test_inspect_leaves_and_destroys_the_world_it_created(catch_server):
    report = inspect_world(catch_server.address)
    with Connection(catch_server.address) as conn:
        assert report.world_name not in Properties(conn)["worlds"].tolist()


def test_inspect_joins_an_existing_world_and_leaves_it(official):
    with Connection(official.address) as conn:
        name = conn.send(pb.CreateWorldRequest()).world_name
        report = inspect_world(official.address, world_name=name, join_settings={"team": 2})
        assert not report.created and report.world_name == name
        assert name in official.worlds            # joined, not destroyed
        assert official.join_settings[-1] == {"team": 2}
        assert "(joined, left after)" in format_report(report).splitlines()[0]
        conn.send(pb.DestroyWorldRequest(world_name=name))  # succeeds only if the report's agent left


def test_unusual_specs_report(official):
    report = inspect_world(official.address, world_settings={"seed": 3})
    assert report.world_name not in official.worlds
    rows = {r.name: r for r in report.actions + report.observations}
    assert rows["aim"].uid == 101 and rows["aim"].bounds == "[-3 .. 3] per-element (3)"
    assert rows["levels"].bounds == "[0 .. 9] per-element (3)"
    assert rows["grid"].bounds == "[-3 .. 6] per-element (6)"
    assert rows["grid"].space == spaces.MultiDiscrete([[3, 5, 7], [5, 6, 7]], start=[[-1, -2, -3], [0, 0, 0]],
                                                      dtype=np.int8)
    assert rows["buttons"].space == spaces.MultiBinary(4) and rows["buttons"].bounds == "-"
    assert rows["say"].dtype == "string" and rows["say"].space is not None
    assert rows["points"].space is None and rows["points"].shape == (-1, 2)
    assert "variable-size (-1) dimension" in rows["points"].reason
    assert rows["camera"].space == spaces.Box(0, 255, (8, 6, 3), np.uint8)
    assert rows["pos.x"].bounds == "[-10, 10]"
    assert report.properties is None and "UNIMPLEMENTED" in report.properties_error

    text = format_report(report)
    assert "Actions (9)" in text and f"Observations ({len(report.observations)})" in text
    grid = _row(text, "Actions", str(rows["grid"].uid))
    assert grid.split()[:5] == [str(rows["grid"].uid), "grid", "int8", "(2,", "3)"]
    assert "[-3 .. 6] per-element (6)" in grid and "MultiDiscrete([[3 5 7] [5 6 7]]" in grid
    points = _row(text, "Observations", str(rows["points"].uid))
    assert "(-1, 2)" in points and "no gymnasium space:" in points
    assert "Properties: none offered" in text and "UNIMPLEMENTED" in text
    assert "'reward' and 'discount': DmRpcEnv's reward/discount" in text
    # One line per spec: no space's text spills over onto another line.
    assert len(_section(text, "Actions")) == len(report.actions)
    assert [line.split()[1] for line in _section(text, "Observations")[:len(report.observations)]] == \
        [r.name for r in report.observations]


def test_unreachable_address_is_a_connection_error_naming_it():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(ConnectionError, match=address):
        inspect_world(address, connect_timeout=2.0)


def test_world_settings_and_world_name_together_are_refused(official):
    with pytest.raises(ValueError, match="not both"):
        inspect_world(official.address, world_settings={"seed": 1}, world_name="world-1")


def test_cli_inspect_prints_the_table(catch_server, capsys):
    from dmrpc_gym.app import cli
    assert cli.main(["inspect", catch_server.address, "--setting", "rows=5", "-s", "columns=3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("World ") and "(5, 3)" in _row(out, "Observations", "1")


def test_cli_inspect_unreachable_is_one_line_and_status_1(capsys):
    from dmrpc_gym.app import cli
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    assert cli.main(["inspect", address, "--connect-timeout", "2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dmrpc-gym inspect: error: ") and address in err and err.count("\n") == 1
