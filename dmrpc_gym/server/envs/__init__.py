"""What worlds are built from: a factory named by a gymnasium id, ``module:attribute``, a callable or a
dm_env source, and what kind of env it makes."""
