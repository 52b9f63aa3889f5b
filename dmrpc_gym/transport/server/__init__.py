"""The server half of the transport: an asyncio protocol per HTTP/2 connection.

``protocol`` (:class:`GrpcProtocol`) feeds what it reads to ``state`` (the connection's I/O-free
state: frames, windows, the stream table, counters, ping/reset/stall policing) and acts on its events;
it is built from ``requests`` (requests queued from DATA), ``replies`` (frames out: headers, messages,
trailers), ``answering`` (requests answered in order, one message or many), ``deadlines`` (the timer
of the state's deadlines) and ``steady``; ``stream`` holds one call's state, ``eager``
runs a call's first step at once. What is served comes from the server layer as a table of
``methods`` (:class:`~dmrpc_gym.transport.server.methods.Method` by path), and the response
headers that name the application as plain pairs.
Imports the shared core only.
"""
