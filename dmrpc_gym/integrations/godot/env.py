"""``GodotEnv``: a Godot game speaking the GymGodot JSON protocol, as a gymnasium Env.

The env listens on a free loopback port, starts the game as a subprocess pointed at
it (``--serverIP``/``--serverPort``/``--renderPath``, ``--fixed-fps``,
``--disable-render-loop``), and exchanges one JSON command and answer per call.
Every way a game can fail is an error, never a hang: see :class:`GodotEnv`.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from dmrpc_gym.integrations.godot.channel import Channel, GodotProtocolError
from dmrpc_gym.integrations.godot.codec import action_to_json, check_space, observation_decoder
from dmrpc_gym.integrations.godot.launch import GameProcess, exchange_failure, find_godot, is_headless, stop_at_exit

__all__ = ["GodotEnv", "scene_path"]

#: The seed sent with each reset is drawn below this bound (it must be exact as a JSON/GDScript float).
SEED_BOUND = 2**31 - 1


def scene_path(project: str | os.PathLike | None, scene: str | None) -> tuple[Path | None, str | None]:
    """The checked project folder and scene; ``FileNotFoundError`` / ``ValueError`` naming what is wrong."""
    folder = None
    if project is not None:
        folder = Path(project).expanduser().resolve()
        if not (folder / "project.godot").is_file():
            what = "does not exist" if not folder.exists() else "holds no project.godot"
            raise FileNotFoundError(f"Godot project folder {str(folder)!r} {what}; "
                                    "expected the folder holding the game's project.godot")
    if scene is None:
        return folder, None
    if not scene.startswith("res://"):
        raise ValueError(f"scene {scene!r} must be a path inside the project starting with 'res://', "
                         "e.g. 'res://main.tscn'")
    if folder is not None and not (folder / scene[len("res://"):]).is_file():
        found = sorted("res://" + p.relative_to(folder).as_posix() for p in folder.rglob("*.tscn"))[:10]
        raise FileNotFoundError(f"scene {scene!r} does not exist in the Godot project {str(folder)!r} "
                                f"(scenes there: {', '.join(found) or 'none'})")
    return folder, scene


class GodotEnv(gym.Env):
    """A Godot game that speaks the GymGodot JSON protocol, started and driven as a gymnasium Env.

    Args:
        project: the folder holding the game's ``project.godot`` (None: the executable
            runs its own game, e.g. an exported one).
        scene: the scene to run (``"res://main.tscn"``; None: the project's main scene).
        observation_space: the observations' space (Box, Discrete, MultiDiscrete, MultiBinary);
            the game's arrays are cast to its dtype and shape.
        action_space: the actions' space (same kinds); ``Discrete`` actions go out as ``[a]``.
        godot: the executable (a path or name, or a command list such as ``["xvfb-run",
            "-a", "godot3"]``); default ``$DMRPC_GODOT``, else the first of
            ``godot3-server``, ``godot3``, ``godot`` on PATH (a drawing build first when
            ``render_mode="rgb_array"``, under ``xvfb-run`` when there is no display).
        fps: physics frames per simulated second (``--fixed-fps``); the game runs them as
            fast as it can, not in real time.
        render_mode: None or ``"rgb_array"`` (the frame the game saves on ``render``).
        connect_timeout: seconds the game has to start and connect.
        step_timeout: seconds each answer may take (None: no limit).
        extra_args: more command-line arguments for the game (after the protocol's).

    Errors, each naming what went wrong and never hanging: a missing executable, project
    or scene (``FileNotFoundError``); a game that exits or does not connect within
    ``connect_timeout`` (``ConnectionError`` / ``TimeoutError`` carrying the game's last
    output lines); a game that dies mid-episode (``ConnectionError``) or stops answering
    (``TimeoutError`` after ``step_timeout``); an answer that is not the protocol's
    (:class:`~dmrpc_gym.integrations.godot.GodotProtocolError`) or does not fit the
    observation space (``ValueError``). After a lost connection, a timeout or a protocol
    error the game is stopped and later calls raise ``ConnectionError``; an observation
    that does not fit leaves the game running, and so does an interrupted call (Ctrl-C:
    its late answer is dropped). ``close()`` always returns and leaves no process behind;
    games still running at interpreter exit are killed.

    Seeding: ``reset(seed=...)`` seeds the env's generator, which draws the seed sent to
    the game as an extra ``"seed"`` key of every reset command. Games that read it (the
    bundled ones do) are reproducible; a game that ignores it is not seeded, and nothing
    seeds the engine's own physics randomness.

    ``env.process`` is the running game (a ``subprocess.Popen``). Pickling re-creates the
    env from its arguments: a new game process.

    >>> from dmrpc_gym.integrations.godot import CATCH_PROJECT, godot_available
    >>> if godot_available():
    ...     env = GodotEnv(project=CATCH_PROJECT, scene="res://catch.tscn",
    ...                    observation_space=gym.spaces.Box(0, 1, (3,), np.float32),
    ...                    action_space=gym.spaces.Discrete(3))
    ...     obs, info = env.reset(seed=1)
    ...     obs, reward, terminated, truncated, info = env.step(2)
    ...     env.close()
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, project: str | os.PathLike | None = None, scene: str | None = None, *,
                 observation_space: gym.Space, action_space: gym.Space,
                 godot: str | os.PathLike | Sequence[str] | None = None, fps: int = 60,
                 render_mode: str | None = None, connect_timeout: float = 30.0,
                 step_timeout: float | None = 30.0, extra_args: Sequence[str] = ()) -> None:
        self._arguments = dict(project=project, scene=scene, observation_space=observation_space,
                               action_space=action_space, godot=godot, fps=fps, render_mode=render_mode,
                               connect_timeout=connect_timeout, step_timeout=step_timeout, extra_args=extra_args)
        self.observation_space = check_space(observation_space, "observation_space")
        self._decode_observation = observation_decoder(self.observation_space)
        self.action_space = check_space(action_space, "action_space")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode {render_mode!r} is not supported; expected None or 'rgb_array'")
        if not isinstance(fps, int) or fps <= 0:
            raise ValueError(f"fps must be a positive int (physics frames per simulated second); got {fps!r}")
        self.render_mode = render_mode
        self.step_timeout = step_timeout
        self.process = None
        self._game: GameProcess | None = None
        self._channel: Channel | None = None
        self._broken: str | None = None
        self._frames = 0
        folder, scene = scene_path(project, scene)
        self.command = find_godot(godot, drawing=render_mode == "rgb_array")
        self._render_dir = tempfile.mkdtemp(prefix="dmrpc-godot-")
        stop_at_exit(self)
        try:
            self._channel = Channel()
            args = [*self.command]
            if folder is not None:
                args += ["--path", str(folder)]
            if scene is not None:
                args.append(scene)
            args += ["--fixed-fps", str(fps), "--disable-render-loop",
                     f"--serverIP={self._channel.host}", f"--serverPort={self._channel.port}",
                     f"--renderPath={self._render_dir}{os.sep}", *map(str, extra_args)]
            self._game = GameProcess(args, cwd=self._render_dir)
            self.process = self._game.process
            try:
                self._channel.accept(connect_timeout, alive=lambda: self._game.alive)
            except (ConnectionError, TimeoutError) as exc:
                raise type(exc)(f"Godot game {scene or '(main scene)'} of {folder or self.command[0]}: {exc}; "
                                f"{self._game.describe()}") from None
        except BaseException:
            self.close()
            raise

    # -- the conversation ------------------------------------------------------------------

    def _fail(self, exc: Exception, doing: str) -> Exception:
        """Stop the game after a failed exchange and return the error to raise (with its output)."""
        channel, self._channel = self._channel, None

        def stop() -> None:
            self._stop_game(grace=0.0)
            if channel is not None:
                channel.close()
        error, self._broken = exchange_failure(self._game, exc, doing, "Godot game ", stop)
        return error

    def _check_open(self) -> Channel:
        if self._channel is None:
            raise ConnectionError(self._broken or "the env is closed")
        return self._channel

    def send(self, message: dict, doing: str) -> None:
        """Send one command (``doing`` names it in errors); used by the vector env to overlap games."""
        channel = self._check_open()
        try:
            channel.send(message)
        except ConnectionError as exc:
            raise self._fail(exc, doing) from None

    def receive(self, keys: Sequence[str], doing: str, timeout: float | None = None) -> dict:
        """The game's answer, checked to hold ``keys``."""
        channel = self._check_open()
        try:
            answer = channel.receive(self.step_timeout if timeout is None else timeout)
            missing = [key for key in keys if key not in answer]
            if missing:
                raise GodotProtocolError(f"the game's answer {answer!r} lacks {', '.join(map(repr, missing))}")
            return answer
        except (ConnectionError, TimeoutError, GodotProtocolError) as exc:
            raise self._fail(exc, doing) from None

    def reset_message(self, seed: int | None = None) -> dict:
        """Seed the env's generator (gymnasium's rule) and return the reset command with the game's seed."""
        super().reset(seed=seed)
        self._frames = 0
        return {"cmd": "reset", "seed": int(self.np_random.integers(SEED_BOUND))}

    def reset_answer(self, answer: dict) -> Any:
        """The first observation from a reset answer."""
        return self._decode_observation(answer["init_observation"], "init_observation")

    def step_message(self, action: Any) -> dict:
        """The step command for ``action``; ``ValueError`` if it is not in the action space."""
        return {"cmd": "step", "action": action_to_json(self.action_space, action)}

    def step_answer(self, answer: dict) -> tuple[Any, float, bool, bool, dict]:
        """``(observation, reward, terminated, truncated, info)`` from a step answer."""
        observation = self._decode_observation(answer["observation"], "observation")
        reward, done = answer["reward"], answer["done"]
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise GodotProtocolError(f"the game's reward {reward!r} is not a number")
        if not isinstance(done, bool):
            raise GodotProtocolError(f"the game's done {done!r} is not a boolean")
        return observation, float(reward), done, False, {}

    # -- gymnasium ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        self.send(self.reset_message(seed), "reset")
        return self.reset_answer(self.receive(("init_observation",), "reset")), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.send(self.step_message(action), "step")
        return self.step_answer(self.receive(("observation", "reward", "done"), "step"))

    def render(self) -> np.ndarray | None:
        """The game's current frame (uint8 HxWx3) for ``render_mode="rgb_array"``, else None."""
        if self.render_mode != "rgb_array":
            return None
        if is_headless(self.command):
            raise RuntimeError(
                f"cannot render with {self.command[0]!r}: it is a headless build without a renderer; "
                "use a drawing build under a virtual display, e.g. godot=['xvfb-run', '-a', 'godot3']")
        self.send({"cmd": "render"}, "render")
        answer = self.receive(("render_error",), "render")
        code = str(answer["render_error"])
        if code != "0":
            raise RuntimeError(f"the game could not render a frame: Godot error code {code}")
        path = Path(self._render_dir) / f"{self._frames}.png"
        self._frames += 1
        return _read_png(path)

    def close(self) -> None:
        """Ask the game to quit, then make sure it has; idempotent, always returns."""
        channel, self._channel = self._channel, None
        if channel is not None:
            if channel.connected and self._game is not None and self._game.alive:
                try:
                    channel.send({"cmd": "close"}, answered=False)
                except Exception:  # noqa: BLE001 - a gone game is what close wants anyway
                    pass
            self._stop_game(grace=2.0)
            channel.close()
        self._stop_game(grace=0.0)
        if getattr(self, "_render_dir", None):
            shutil.rmtree(self._render_dir, ignore_errors=True)
            self._render_dir = None

    def _stop_game(self, grace: float) -> None:
        if self._game is not None:
            self._game.stop(grace=grace)

    def __reduce__(self) -> tuple:
        # Pickled as its arguments: unpickling starts a new game (SubprocVecEnv, SuperSuit, RLlib ship it so).
        return _recreate, (type(self), self._arguments)

    def close_at_exit(self) -> None:
        """Called at interpreter exit for an env still alive then: closes it, so that no game outlives Python."""
        self.close()

    def __del__(self) -> None:
        try:
            if sys.is_finalizing():        # threads are frozen: only the process can still be stopped
                self._stop_game(grace=0.0)
                return
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass


def _recreate(cls: type, arguments: dict) -> GodotEnv:
    return cls(**arguments)


def _read_png(path: Path) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise ImportError("reading the game's rendered frames needs Pillow: pip install pillow") from None
    if not path.is_file():
        raise RuntimeError(f"the game reported a rendered frame but wrote no {str(path)!r}")
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8).copy()
