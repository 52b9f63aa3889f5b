"""The client half of the transport: one blocking HTTP/2 connection per server, its gRPC streams.

``connection`` (:class:`GrpcConnection`, the frame reader and writer) hands whole frames to
``state`` (its I/O-free state: settings, windows, the stream table, the ACKs owed) and is built from
mixins: ``control`` (the events of control frames), ``large_messages`` (messages read and sent in
place), ``clock`` (deadlines on the socket), ``keepalive`` (PINGs while idle). Beside it:
``stream`` (one call), ``pool`` (connections shared per address), ``idle_watcher`` (the thread
that reads while no call does), ``interrupts`` (Ctrl-C mid-frame), and the two transports,
``h2_transport`` (ours) and ``grpcio_transport`` (grpcio's). Imports the shared core only.
"""
