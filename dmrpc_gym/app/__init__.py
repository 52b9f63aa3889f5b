"""The application layer: the ``dmrpc-gym`` command, the demo, reports, benchmarks, embedded servers."""
