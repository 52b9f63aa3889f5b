"""Space samples to and from the GymGodot protocol's JSON arrays (no engine needed)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from gymnasium import spaces

from dmrpc_gym.integrations.godot.codec import action_to_json, check_space, observation_from_json

BOX = spaces.Box(-1.0, 1.0, (2, 2), np.float32)


@pytest.mark.parametrize("space, action, sent", [
    (spaces.Discrete(3), 2, [2]),
    (spaces.Discrete(3), np.int8(0), [0]),
    (spaces.Discrete(3, start=-1), -1, [-1]),
    (spaces.Discrete(3), np.array(1), [1]),
    (spaces.Discrete(3), 1.0, [1]),
    (BOX, np.array([[0.5, -0.5], [1.0, 0.0]]), [[0.5, -0.5], [1.0, 0.0]]),   # float64 in bounds: accepted
    (spaces.MultiDiscrete([2, 5]), [1, 4], [1, 4]),
    (spaces.MultiBinary(3), np.array([1, 0, 1], np.int8), [1, 0, 1]),
])
def test_actions_go_out_as_json_arrays(space, action, sent):
    assert action_to_json(space, action) == sent
    assert json.loads(json.dumps(action_to_json(space, action))) == sent


@pytest.mark.parametrize("space, action, expected", [
    (spaces.Discrete(3), 3, "an integer in [0, 2]"),
    (spaces.Discrete(3), True, "Discrete(3)"),
    (spaces.Discrete(3, start=-1), 2, "an integer in [-1, 1]"),
    (BOX, [0.5, 0.5], "an array of shape (2, 2) within [-1.0, 1.0]"),
    (BOX, [[2.0, 0.0], [0.0, 0.0]], "Box(-1.0, 1.0, (2, 2), float32)"),
    (spaces.MultiDiscrete([2, 5]), [2, 0], "0 <= value - start < [2, 5]"),
    (spaces.MultiBinary(3), [1, 2, 0], "an array of 0/1 of shape (3,)"),
    (spaces.MultiBinary(3), "101", "MultiBinary(3)"),
])
def test_actions_outside_their_space_are_refused_by_name(space, action, expected):
    with pytest.raises(ValueError) as excinfo:
        action_to_json(space, action)
    assert str(excinfo.value).startswith("action ") and expected in str(excinfo.value)


def test_observations_take_the_spaces_dtype_and_shape():
    obs = observation_from_json(BOX, [0.25, 0.5, -1, 1], "observation")       # flat: reshaped
    assert obs.dtype == np.float32 and obs.shape == (2, 2) and obs[1, 0] == -1
    assert observation_from_json(spaces.Discrete(4), [3], "observation") == 3
    bits = observation_from_json(spaces.MultiBinary(2), [True, False], "observation")
    assert bits.dtype == np.int8 and bits.tolist() == [1, 0]
    levels = observation_from_json(spaces.MultiDiscrete([3, 3]), [2.0, 0.0], "observation")   # GDScript floats
    assert levels.dtype == np.int64 and levels.tolist() == [2, 0]


@pytest.mark.parametrize("space, value, reason", [
    (BOX, [0.1, 0.2, 0.3], "3 value(s), expected 4 (shape (2, 2))"),
    (BOX, [0.1, 0.2, 0.3, 7], "out of the space's bounds"),
    (BOX, ["0.1", 0.2, 0.3, 0.4], "expected numbers"),
    (BOX, {"x": 1}, "expected numbers"),
    (spaces.Discrete(3), [1.5], "expected integers for dtype int64"),
    (spaces.Discrete(3), [3], "out of the space's bounds"),
    (spaces.MultiDiscrete([3, 3]), [1, None], "expected numbers"),
])
def test_observations_that_do_not_fit_are_errors_naming_them(space, value, reason):
    with pytest.raises(ValueError) as excinfo:
        observation_from_json(space, value, "init_observation")
    message = str(excinfo.value)
    assert message.startswith("the game's init_observation ") and f"does not fit {space}" in message
    assert reason in message


def test_spaces_the_protocol_cannot_carry_are_refused():
    assert check_space(BOX, "observation_space") is BOX
    with pytest.raises(TypeError, match="observation_space must be a gymnasium space of one of Box, Discrete, "
                                        "MultiDiscrete, MultiBinary; got Text"):
        check_space(spaces.Text(5), "observation_space")


def test_the_per_space_decoder_gives_what_the_general_path_gives():
    """The fast check of flat, evenly bounded float Boxes accepts and refuses exactly as the general path."""
    from dmrpc_gym.integrations.godot.codec import observation_decoder
    space = spaces.Box(0.0, 1.0, (3,), np.float32)
    decode = observation_decoder(space)
    for value in ([0.5, 1, 0], [0, 0, 0.25], [1.0, 1.0, 1.0]):
        got = decode(value, "observation")
        assert got.dtype == np.float32 and np.array_equal(got, observation_from_json(space, value, "observation"))
    for bad in ([0.5, 1.5, 0], [0.5, float("nan"), 0], [0.5, 0.5], ["a", 0, 0], 0.5, [[0.5, 0.5, 0.5]]):
        try:
            expected = observation_from_json(space, bad, "observation")
        except ValueError as err:
            with pytest.raises(ValueError) as got:
                decode(bad, "observation")
            assert str(got.value) == str(err)
        else:                                   # the general path accepts it (e.g. reshaped): so must we
            assert np.array_equal(decode(bad, "observation"), expected)
    uneven = observation_decoder(spaces.Box(np.array([0, -1, 0], np.float32), np.array([1, 1, 2], np.float32)))
    assert uneven([0.5, -0.5, 1.5], "observation").tolist() == [0.5, -0.5, 1.5]
    with pytest.raises(ValueError, match="out of the space's bounds"):
        uneven([0.5, -1.5, 1.5], "observation")
