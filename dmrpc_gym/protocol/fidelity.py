"""What our own client and server say to each other so that a served env is the local env.

dm_env_rpc carries tensors by spec; it has no ``render_mode``, no Tuple, no
16-bit dtypes and no way to ask for a frame without stepping. Between a
dmrpc_gym client and a dmrpc_gym server these travel by paths that foreign
peers never meet:

- the client names the ``render_mode`` it wants in a request header,
  :data:`RENDER_METADATA` (:data:`NO_RENDER` for none); a server builds the envs
  of that stream's worlds with it. A foreign client sends no such header and
  gets the server's default (``serve --render``).
- a server that offers :data:`FIDELITY_FEATURE` (in its response headers) gives
  every joined agent two properties: :data:`SPACES_PROPERTY`, the exact spaces
  (and a dm_env's specs) as text (:mod:`dmrpc_gym.spaces.described`), and
  :data:`FRAME_PROPERTY`, the env's ``render()`` of its current state, made
  only when read.

>>> FIDELITY_FEATURE, RENDER_METADATA
('fidelity', 'dmrpc-gym-render-mode')
"""
from __future__ import annotations

__all__ = ["FIDELITY_FEATURE", "RENDER_METADATA", "NO_RENDER", "SPACES_PROPERTY", "FRAME_PROPERTY", "render_header"]

#: The feature a dmrpc_gym server lists when it offers the two properties below.
FIDELITY_FEATURE = "fidelity"
#: The request header (gRPC metadata) in which our client names its render_mode.
RENDER_METADATA = "dmrpc-gym-render-mode"
#: Its value for ``render_mode=None``.
NO_RENDER = "none"
#: The agent property holding the exact spaces (and dm_env specs) as text.
SPACES_PROPERTY = "spaces"
#: The agent property whose read renders the current state (uint8, H x W x C).
FRAME_PROPERTY = "frame"


def render_header(render_mode: str | None) -> tuple[str, str]:
    """The request header naming ``render_mode`` (None: :data:`NO_RENDER`).

    >>> render_header(None), render_header("rgb_array")
    (('dmrpc-gym-render-mode', 'none'), ('dmrpc-gym-render-mode', 'rgb_array'))
    """
    return RENDER_METADATA, NO_RENDER if render_mode is None else render_mode
