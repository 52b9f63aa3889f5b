"""Serving: the gRPC listener, each stream's session, the services beside dm_env_rpc (health,
reflection), what a server has done (stats, metrics, ``status``) and the status codes it answers with."""
