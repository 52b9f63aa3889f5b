"""The server half of the transport: an asyncio protocol per HTTP/2 connection.

``protocol`` (:class:`GrpcProtocol`) is built from ``requests`` (frames in: HEADERS, DATA),
``replies`` (frames out: headers, messages, trailers) and ``conduct`` (ping and reset policing);
``stream`` holds one call's state, ``eager`` runs a call's first step at once. The response
headers that name the application come from the server layer as plain pairs.
Imports the shared core only.
"""
