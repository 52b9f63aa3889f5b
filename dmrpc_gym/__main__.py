"""``python -m dmrpc_gym``: the ``dmrpc-gym`` command."""
from dmrpc_gym.app.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
