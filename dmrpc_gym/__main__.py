"""``python -m dmrpc_gym``: the ``dmrpc-gym`` command."""
from dmrpc_gym.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
