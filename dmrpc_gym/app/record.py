"""``dmrpc-gym record ADDRESS --out run.gif``: a rollout of a world rendered to a video file.

The world is played by a random policy, or by a saved Stable-Baselines3 model
(``--model``, trained through :class:`~dmrpc_gym.integrations.flat_spaces.FlatSpaces`),
and every step's ``RGB`` observation becomes a frame. A multi-agent world is
played by every agent at once (random actions). ``.gif`` is written with
Pillow, ``.mp4`` with the ffmpeg that the ``imageio-ffmpeg`` package ships
(both in the ``video`` extra). A progress bar (rich) shows the steps.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dmrpc_gym.client.seeding import AUTO
from dmrpc_gym._extras import install_hint

__all__ = ["record", "write_video", "FORMATS"]

#: File suffix -> what writes it.
FORMATS = (".gif", ".mp4")


def _check_out(out: str | Path) -> Path:
    """The output path, checked before any step is taken: a known suffix, an existing directory."""
    path = Path(out)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"--out {str(out)!r}: expected a file ending in {' or '.join(FORMATS)}")
    if not path.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: directory {str(path.parent)!r} does not exist")
    if path.suffix.lower() == ".mp4":
        _ffmpeg_writer()
    else:
        _pillow()
    return path


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise ValueError(f"writing .gif needs Pillow: {install_hint('video')}") from None
    return Image


def _ffmpeg_writer():
    try:
        import imageio_ffmpeg
    except ImportError:
        raise ValueError("writing .mp4 needs imageio-ffmpeg (it ships an ffmpeg binary): "
                         f"{install_hint('video')}, or write a .gif") from None
    return imageio_ffmpeg.write_frames


def _scaled(frame: np.ndarray, minimum: int = 256) -> np.ndarray:
    """Small frames (a 10x10 board) repeated up to at least ``minimum`` pixels a side, pixels kept sharp."""
    factor = max(1, -(-minimum // max(frame.shape[0], frame.shape[1])))
    if factor > 1:
        frame = frame.repeat(factor, axis=0).repeat(factor, axis=1)
    # Even sizes: what the H.264 encoder wants.
    return frame[: frame.shape[0] // 2 * 2, : frame.shape[1] // 2 * 2]


def write_video(frames: Sequence[np.ndarray], out: str | Path, fps: int = 10) -> Path:
    """Write uint8 HxWx3 ``frames`` to ``out`` (``.gif`` or ``.mp4``); returns the path.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.gif")
    >>> frames = [np.full((4, 4, 3), v, np.uint8) for v in (0, 255)]
    >>> write_video(frames, path).stat().st_size > 0
    True
    """
    path = _check_out(out)
    if not frames:
        raise ValueError("no frames to write")
    frames = [_scaled(np.asarray(f, np.uint8)) for f in frames]
    if path.suffix.lower() == ".gif":
        image = _pillow()
        pictures = [image.fromarray(f) for f in frames]
        pictures[0].save(path, save_all=True, append_images=pictures[1:], duration=int(1000 / fps), loop=0)
        return path
    height, width = frames[0].shape[:2]
    writer = _ffmpeg_writer()(str(path), (width, height), fps=fps, macro_block_size=1, quality=8)
    writer.send(None)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    return path


def _progress(total: int, show: bool):
    """A rich progress bar over ``total`` steps (or a no-op); ``advance()`` moves it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    progress = Progress(TextColumn("recording"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        disable=not show, transient=False)
    return progress, progress.add_task("steps", total=total)


def _single_agent(address: str, kwargs: Mapping[str, Any], model_path: str | None, algo: str,
                  seed: int) -> tuple[Any, Callable[[], np.ndarray | None], Callable[[], bool], Callable[[], None]]:
    from dmrpc_gym.client.env import DmRpcEnv
    env = DmRpcEnv(address, render_mode="rgb_array", **kwargs)
    try:                                  # whatever fails before recording starts leaves no world behind
        act: Callable[[Any], Any]
        if model_path is None:
            env.action_space.seed(seed)
            act = lambda obs: env.action_space.sample()          # noqa: E731
            view = env
        else:
            import stable_baselines3
            from dmrpc_gym.integrations.flat_spaces import FlatSpaces
            model_class = getattr(stable_baselines3, algo, None)
            if model_class is None:
                raise ValueError(f"--algo {algo!r} is not a Stable-Baselines3 algorithm (e.g. PPO, A2C, DQN)")
            view = FlatSpaces(env)
            model = model_class.load(model_path, device="cpu")
            act = lambda obs: model.predict(obs, deterministic=True)[0]   # noqa: E731
        state = {"obs": view.reset(seed=seed)[0]}
    except BaseException:
        env.close()
        raise

    def step() -> bool:
        obs, _, terminated, truncated, _ = view.step(act(state["obs"]))
        state["obs"] = obs
        if terminated or truncated:
            state["obs"] = view.reset()[0]
            return True
        return False
    return env, env.render, step, env.close


def _multi_agent(address: str, agents: list[str], kwargs: Mapping[str, Any], seed: int):
    from dmrpc_gym.client.parallel import DmRpcParallelEnv
    kwargs = {k: v for k, v in kwargs.items() if k != "join_settings"}
    env = DmRpcParallelEnv(address, agents=agents, render_mode="rgb_array", **kwargs)
    env.reset(seed=seed)
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(seed + i)

    def step() -> bool:
        env.step({agent: env.action_space(agent).sample() for agent in env.agents})
        if not env.agents:
            env.reset()
            return True
        return False
    return env, env.render, step, env.close


def record(address: str, out: str | Path, *, steps: int = 200, fps: int = 10, seed: int = 0,
           model: str | None = None, algo: str = "PPO", world_settings: Mapping[str, Any] | None = None,
           world_name: str | None = None, join_settings: Mapping[str, Any] | None = None,
           seed_setting: str | None = AUTO, connect_timeout: float = 5.0,
           step_timeout: float | None = 30.0, progress: bool = True, tls: Any = None,
           token: str | None = None, compression: str | None = None,
           render_observation: str | None = None) -> dict[str, Any]:
    """Play ``steps`` steps of the world at ``address`` and write the frames to ``out``.

    Returns ``{"path", "frames", "episodes"}``. The output path is checked
    before anything is played; a world without a render observation raises
    ``ValueError`` saying so. ``render_observation`` names the observation to record
    (default: ``RGB``). ``tls``, ``token`` and ``compression`` go to every connection
    (see ``DmRpcEnv``).

    >>> import tempfile, os
    >>> from dmrpc_gym.worlds.embedded import embedded_server
    >>> out = os.path.join(tempfile.mkdtemp(), "catch.gif")
    >>> result = record(embedded_server("catch").address, out, steps=12, progress=False)
    >>> result["frames"], result["episodes"]
    (13, 1)
    """
    from dmrpc_gym.app.report import inspect_world

    path = _check_out(out)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    options = dict(tls=tls, token=token, compression=compression)
    report = inspect_world(address, world_settings=world_settings, world_name=world_name,
                           join_settings=join_settings, connect_timeout=connect_timeout, **options)
    kwargs = dict(world_settings=world_settings, world_name=world_name, join_settings=join_settings,
                  seed_setting=seed_setting, connect_timeout=connect_timeout, step_timeout=step_timeout,
                  render_observation=render_observation, **options)
    if report.agents:
        if model is not None:
            raise ValueError("--model plays one agent; this is a multi-agent world "
                             f"({', '.join(a.name for a in report.agents)}), recorded with random actions only")
        _, render, step, close = _multi_agent(address, [a.name for a in report.agents], kwargs, seed)
    else:
        _, render, step, close = _single_agent(address, kwargs, model, algo, seed)
    frames: list[np.ndarray] = []
    episodes = 0
    bar, task = _progress(steps, progress)
    try:
        with bar:
            frames.append(render())
            for _ in range(steps):
                episodes += step()
                frames.append(render())
                bar.advance(task)
    finally:
        close()
    frames = [f for f in frames if f is not None]
    write_video(frames, path, fps=fps)
    return {"path": str(path), "frames": len(frames), "episodes": episodes}

