"""``dmrpc-gym dashboard ADDRESS``: a local web page that shows a running server's worlds live.

It reaches the server as a client does (TCP, ``unix:`` addresses, TLS, a token) and reads what
``dmrpc-gym status`` reads, plus what a watch gives (:mod:`dmrpc_gym.server.serving.watching`: episode
returns, the episode's step, the last reward, frames of a world the page picks). Parts, one a module:
:mod:`~dmrpc_gym.app.dashboard.feed` (the reading, on a thread), :mod:`~dmrpc_gym.app.dashboard.web`
(the local HTTP server and its safety checks) and :mod:`~dmrpc_gym.app.dashboard.page` (the page, its
script and style inline).
"""
from __future__ import annotations

from dmrpc_gym.app.dashboard.feed import Feed
from dmrpc_gym.app.dashboard.web import DashboardServer, check_bind, host_allowed

__all__ = ["DashboardServer", "Feed", "check_bind", "host_allowed"]
