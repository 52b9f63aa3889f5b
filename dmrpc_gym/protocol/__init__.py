"""dm_env_rpc on the wire: messages, names, the tensor codec, spec checks and spec tables.

The bottom layer: it imports nothing else of the package. Everything above it
(transport, spaces, client, server) speaks through these modules.
"""
