"""Ray on loopback only, set before any test module imports ray.

Ray takes a node's address from the interface that routes to the internet;
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` makes it 127.0.0.1 instead (ray reads it
at import), so the tests' Ray processes talk over loopback only. Token
authentication stays on for the `ray start` cluster and the drivers joining it.
"""
import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_AUTH_MODE", "token")
