"""gRPC over HTTP/2, both ends: the shared framing, the client streams, the server protocol.

A :class:`~dmrpc_gym.transport.base.Transport` moves whole gRPC messages (bytes)
of one bidirectional stream; it knows nothing of dm_env_rpc's messages above.
"""
