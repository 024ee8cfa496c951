"""OpenMP threads that wait sleep instead of spinning (GNU OpenMP's ``OMP_WAIT_POLICY=PASSIVE``),
unless the environment says otherwise. Imported by the conftest before torch loads OpenMP.

torch runs its CPU ops on one OpenMP thread per core. By default a thread that waits for work
spins for a while; with more threads than free cores (two pytest-xdist workers of two threads
each on two cores, or any other load) the spinning threads take the cores from the ones with
work: a small transformer's test step took 30 times the CPU time (10.5 s against 0.33 s). The
threads, and so every threaded path the tests check, stay as they are."""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
