"""The server half of the transport: an asyncio protocol per HTTP/2 connection.

``protocol`` (:class:`GrpcProtocol`) is built from ``requests`` (frames in: HEADERS, DATA),
``replies`` (frames out: headers, messages, trailers), ``many`` (handlers that answer with many
messages) and ``conduct`` (ping and reset policing); ``stream`` holds one call's state, ``eager``
runs a call's first step at once. What is served comes from the server layer as a table of
``methods`` (:class:`~dmrpc_gym.transport.server.methods.Method` by path), and the response
headers that name the application as plain pairs.
Imports the shared core only.
"""
