"""The client side: dm_env_rpc worlds as gymnasium, vector and PettingZoo environments."""
