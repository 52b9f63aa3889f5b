"""Where an env renders: always on one thread of its own.

OpenGL renderers keep their context current on the thread that made it:
gymnasium's MuJoCo envs (EGL) render all-black frames when ``render()`` runs on
another thread, and dm_control does the same. The server's env calls run on
whichever worker thread is free (:mod:`~dmrpc_gym.server.running.workers`), so every
frame the server makes is rendered on a thread kept for that env, made on its
first frame and stopped when the env is closed (:func:`release`).

>>> class Env:
...     def render(self):
...         import threading
...         return threading.current_thread().name
>>> env = Env()
>>> render(env) == render(env) != __import__("threading").current_thread().name
True
>>> release(env)
"""
from __future__ import annotations

import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

__all__ = ["render", "call", "release"]

_THREADS: "weakref.WeakKeyDictionary[Any, ThreadPoolExecutor]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def call(env: Any, fn: Callable[..., Any], *args: Any, start: bool = True) -> Any:
    """``fn(*args)`` on ``env``'s render thread (made now unless ``start`` is False: then, without
    one, inline; inline too for an env that cannot be a weak key)."""
    try:
        with _LOCK:
            thread = _THREADS.get(env)
            if thread is None and start:
                thread = _THREADS[env] = ThreadPoolExecutor(1, thread_name_prefix="dmrpc-gym-render")
    except TypeError:          # not weakly referable or not hashable: where we are
        thread = None
    return fn(*args) if thread is None else thread.submit(fn, *args).result()


def render(env: Any) -> Any:
    """``env.render()`` on the env's own render thread."""
    return call(env, env.render)


def release(env: Any) -> None:
    """Stop ``env``'s render thread, if it has one (the env is being closed)."""
    try:
        with _LOCK:
            thread = _THREADS.pop(env, None)
    except TypeError:
        return
    if thread is not None:
        thread.shutdown(wait=False)
