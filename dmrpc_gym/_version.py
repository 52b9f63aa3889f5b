"""The package version (read by setup.cfg and ``dmrpc_gym.__version__``)."""
__version__ = "0.1.0"
