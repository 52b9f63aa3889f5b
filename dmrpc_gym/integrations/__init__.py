"""Bridges from dmrpc_gym envs to other libraries (RLlib, ...), one subpackage each."""
