"""The soak's CI version (bench/soak, ``--ci``): 2 minutes of sustained load at small scale."""
